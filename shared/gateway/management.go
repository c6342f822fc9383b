package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// serveManagement implements the @connections API:
// POST (PostToConnection), GET (GetConnection), DELETE (DeleteConnection).
// An unknown connection id answers 410 with X-Amzn-ErrorType GoneException,
// which the SDK maps to *types.GoneException.
func (g *Gateway) serveManagement(w http.ResponseWriter, r *http.Request, id string) {
	if !signed(r) {
		// execute-api requires SigV4 on @connections (IAM authorization).
		apiError(w, http.StatusForbidden, "MissingAuthenticationTokenException", "Missing Authentication Token")
		return
	}
	g.mu.Lock()
	c := g.conns[id]
	g.mu.Unlock()
	if c != nil {
		select {
		case <-c.connected:
			// $connect succeeded: wait (briefly) for the upgrade to finish.
			select {
			case <-c.ready:
			case <-time.After(5 * time.Second):
				c = nil
			}
		default:
			// Still in $connect: AWS answers 410 until $connect succeeds.
			c = nil
		}
	}
	if c == nil || c.ws == nil {
		apiError(w, http.StatusGone, "GoneException", "")
		return
	}
	switch r.Method {
	case http.MethodPost:
		data, err := io.ReadAll(io.LimitReader(r.Body, MaxMessageBytes+1))
		if err != nil {
			apiError(w, http.StatusBadRequest, "BadRequestException", "unreadable body")
			return
		}
		if len(data) > MaxMessageBytes {
			g.stats.OversizeFrames.Add(1)
			apiError(w, http.StatusRequestEntityTooLarge, "PayloadTooLargeException", "payload exceeds 128 KiB")
			return
		}
		// A client that stops reading (a half-dead socket: no FIN, no RST)
		// must not hold the caller: a frame that cannot be written within
		// the write timeout disconnects the client, like any dead
		// connection, and the caller gets 410.
		wctx, cancel := context.WithTimeout(r.Context(), g.writeTimeout())
		err = c.ws.Write(wctx, websocket.MessageText, data)
		cancel()
		if err != nil {
			if wctx.Err() != nil && r.Context().Err() == nil {
				g.stats.SlowConsumers.Add(1)
				g.log().Warn("connection did not take a frame in time; disconnected", "connectionId", c.id, "timeout", g.writeTimeout().String())
				c.ws.CloseNow()
			}
			apiError(w, http.StatusGone, "GoneException", "")
			return
		}
		w.WriteHeader(http.StatusOK)
	case http.MethodGet:
		c.mu.Lock()
		last := c.lastActive
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"connectedAt":  c.connectedAt.UTC().Format(time.RFC3339),
			"lastActiveAt": last.UTC().Format(time.RFC3339),
			"identity":     map[string]string{"sourceIp": c.sourceIP},
		})
	case http.MethodDelete:
		c.ws.Close(websocket.StatusNormalClosure, "deleted by the backend")
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, http.StatusMethodNotAllowed, "BadRequestException", "method not allowed")
	}
}

// signed reports whether r carries a SigV4 signature (any credentials are
// accepted locally; an unsigned call is refused as AWS refuses it).
func signed(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	return strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") && strings.Contains(auth, "Credential=") && strings.Contains(auth, "Signature=") &&
		(r.Header.Get("X-Amz-Date") != "" || r.Header.Get("Date") != "")
}

func apiError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", typ)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}
