// Package console serves the local web console (issue 15): a chat client
// built on the TypeScript SDK, shipped as static files embedded in the
// binary (no Node.js needed to run it), plus what only a local stack may
// offer a browser: a token for any user and device, and a message's trace
// read with the admin key, which never leaves this process. signet local
// serves it on its own port; nothing of it is in the SAM deployment.
//
// static/index.html and static/style.css are the page; static/app.js and
// static/sdk/ are built from web/console (TypeScript) and the SDK by `make
// console` (npm run build in web/console), and `make test-console` fails
// when they are not what the sources build now.
package console

import (
	"embed"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"time"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/im"
)

//go:embed static
var files embed.FS

// Config is what the console needs from the stack it belongs to.
type Config struct {
	// WebSocketURL is the stack's WebSocket API (ws://host:port/).
	WebSocketURL string
	// APIURL is the HTTP API, and AdminKey its admin key (for traces).
	APIURL, AdminKey string
	// Secret signs the tokens the console hands out (the stack's JWT secret).
	Secret []byte
	// TokenTTL is how long a token is valid (1 hour when zero).
	TokenTTL time.Duration
	// Client calls the HTTP API (http.DefaultClient when nil).
	Client *http.Client
}

// Handler serves the console: its files, GET /config.json (the WebSocket
// API and the HTTP API, whose GET /v1/handshake the SDK asks why a
// handshake was refused), POST /token
// {"userId","deviceId"} and GET /trace/{messageId}.
func Handler(cfg Config) http.Handler {
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = time.Hour
	}
	if cfg.Client == nil {
		cfg.Client = http.DefaultClient
	}
	static, _ := fs.Sub(files, "static")
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /config.json", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"webSocketUrl": cfg.WebSocketURL, "apiUrl": cfg.APIURL})
	})
	mux.HandleFunc("POST /token", cfg.token)
	mux.HandleFunc("GET /trace/{id}", cfg.trace)
	return mux
}

// token mints a token for the user and device the body names: anyone who
// reaches a local console may be anyone (it listens on loopback).
func (cfg Config) token(w http.ResponseWriter, r *http.Request) {
	var req struct {
		UserID   string `json:"userId"`
		DeviceID string `json:"deviceId"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "the body must be JSON: {\"userId\": …, \"deviceId\": …}")
		return
	}
	user, device := im.UserID(req.UserID), im.DeviceID(req.DeviceID)
	if !user.Person() {
		writeError(w, http.StatusBadRequest, "userId must be 1-64 characters of [A-Za-z0-9._@-], not starting with "+im.AppSenderPrefix)
		return
	}
	if device == "" {
		device = "web"
	}
	if !device.Valid() {
		writeError(w, http.StatusBadRequest, "deviceId must be 1-64 characters of [A-Za-z0-9._@-]")
		return
	}
	tok, err := auth.Mint(cfg.Secret, user, device, time.Now(), cfg.TokenTTL)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"token": tok, "userId": string(user), "deviceId": string(device)})
}

// trace relays GET /v1/messages/{id}/trace of the HTTP API with the admin key.
func (cfg Config) trace(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, cfg.APIURL+"/v1/messages/"+url.PathEscape(r.PathValue("id"))+"/trace", nil)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	req.Header.Set("Authorization", "Bearer "+cfg.AdminKey)
	resp, err := cfg.Client.Do(req)
	if err != nil {
		writeError(w, http.StatusBadGateway, "the HTTP API did not answer: "+err.Error())
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 8<<20))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
