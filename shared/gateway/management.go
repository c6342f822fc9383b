package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
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
		// Accepted once queued for the connection's writer, as API Gateway
		// answers before the client has the frame; a client that stopped
		// reading (a half-dead socket: no FIN, no RST) is disconnected when
		// its queue is full or a write times out, and the push answers 410.
		if !g.enqueue(c, data) {
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
		c.deleteOnce.Do(func() { close(c.deleted) })
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
