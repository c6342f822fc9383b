package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/coder/websocket"
)

// Lambda is a WebSocket route handler, as the Lambda runtime would call it.
type Lambda func(context.Context, events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error)

// Authorizer is a REQUEST authorizer, as the Lambda runtime would call it.
type Authorizer func(context.Context, events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error)

// Route is one route of the API.
type Route struct {
	Handler Lambda
	// Responds is true for two-way routes: a non-empty response body is
	// sent back to the caller (a route response in API Gateway terms).
	Responds bool
	// Mock is a one-way route with a MOCK integration: API Gateway meters
	// the frame (it keeps the connection from idling out) and invokes
	// nothing (Handler is nil).
	Mock bool
}

// Limits of API Gateway WebSocket APIs.
const (
	MaxMessageBytes = 128 << 10
	MaxFrameBytes   = 32 << 10
	IdleTimeout     = 10 * time.Minute
	MaxLifetime     = 2 * time.Hour
	// DefaultWriteTimeout is how long a client may take to accept a frame.
	DefaultWriteTimeout = 5 * time.Second
)

// Gateway serves WebSocket clients on "/" and the management API on
// "/{stage}/@connections/{id}".
type Gateway struct {
	// Stage is the stage name (default "local").
	Stage string
	// APIID appears in request contexts and ARNs (default "local").
	APIID string
	// Authorizer runs on $connect before the upgrade (nil: allow everyone).
	Authorizer Authorizer
	// Routes by route key: "$connect", "$disconnect", "$default", actions.
	Routes map[string]Route
	// IdleTimeout and MaxLifetime default to AWS's 10 min and 2 h.
	IdleTimeout, MaxLifetime time.Duration
	// Log receives structured logs (slog.Default when nil).
	Log *slog.Logger
	// WriteTimeout bounds writing one frame to a client (default
	// DefaultWriteTimeout): a client that does not take it in time is
	// disconnected and the push answered 410.
	WriteTimeout time.Duration
	// Serial runs one connection's frames one after another. API Gateway
	// invokes each frame's integration independently and concurrently;
	// this is a test switch, never the default.
	Serial bool

	stats Stats
	mu    sync.Mutex
	conns map[string]*conn
	wg    sync.WaitGroup
	// base is the parent of every connection's lifetime: Close cancels it,
	// which ends connections still in their $connect handshake too; closed
	// refuses connections that arrive after Close.
	base       context.Context
	cancelBase context.CancelFunc
	closed     bool
}

type conn struct {
	id          string
	ws          *websocket.Conn
	connectedAt time.Time
	lastActive  time.Time
	sourceIP    string
	authorizer  map[string]any
	mu          sync.Mutex // guards lastActive
	// out queues frames for the connection's writer (route responses and
	// pushes, in the order accepted); gone is closed when the connection
	// is closed, so that nothing waits on a dead writer.
	out  chan []byte
	gone chan struct{}
	// deleted is closed by DeleteConnection: the writer writes what was
	// accepted before it, then closes the socket (as API Gateway delivers
	// a frame posted before the delete).
	deleted    chan struct{}
	deleteOnce sync.Once
	// slow is set by the first of the ways a client is found not reading
	// (its writer's timeout, its full queue), which counts it once.
	slow atomic.Bool
	// connected is closed when $connect has succeeded: before that,
	// PostToConnection answers 410 as AWS does. ready is closed once ws is
	// set (or the upgrade failed, ws nil): a push between the two waits for
	// the socket, so a push right after the client got its 101 never meets
	// a 410.
	connected, ready chan struct{}
}

// log is the gateway's logger (Log, or slog's default).
func (g *Gateway) log() *slog.Logger { return cmp.Or(g.Log, slog.Default()) }

// Stats counts what the gateway refused to send or sent though a real
// client would not want it: every one is a fault of the backend.
type Stats struct {
	// EmptyFrames are route responses without a body on two-way routes:
	// API Gateway sends them as empty frames.
	EmptyFrames atomic.Int64
	// OversizeFrames are route responses and pushes over 128 KB, which
	// API Gateway refuses.
	OversizeFrames atomic.Int64
	// SlowConsumers are clients disconnected because they did not take a
	// frame within the write timeout or let their queue fill (not a
	// backend fault), each counted once.
	SlowConsumers atomic.Int64
	// Messages are what API Gateway bills as messages, both directions:
	// each client message and each frame sent to a client (route response
	// or PostToConnection), per started 32 KB.
	Messages atomic.Int64
	// ConnectionMs is how long connections were open, in total.
	ConnectionMs atomic.Int64
}

// MeterUnit is the size API Gateway meters WebSocket messages in.
const MeterUnit = 32 << 10

func meterUnits(n int) int64 { return max(1, int64((n+MeterUnit-1)/MeterUnit)) }

// Metered returns the billed messages (both directions, per 32 KB) and
// connection minutes so far.
func (g *Gateway) Metered() (messages int64, connectionMinutes float64) {
	ms := g.stats.ConnectionMs.Load()
	g.mu.Lock()
	for _, c := range g.conns {
		ms += time.Since(c.connectedAt).Milliseconds() // still open
	}
	g.mu.Unlock()
	return g.stats.Messages.Load(), float64(ms) / 60000
}

// SlowConsumers counts clients disconnected for not reading.
func (g *Gateway) SlowConsumers() int64 { return g.stats.SlowConsumers.Load() }

func (g *Gateway) writeTimeout() time.Duration {
	if g.WriteTimeout > 0 {
		return g.WriteTimeout
	}
	return DefaultWriteTimeout
}

// Faults returns the counts of empty and oversize frames the backend asked
// the gateway to send.
func (g *Gateway) Faults() (empty, oversize int64) {
	return g.stats.EmptyFrames.Load(), g.stats.OversizeFrames.Load()
}

// StageName is the stage the API is deployed to ("local" by default).
func (g *Gateway) StageName() string { return g.stage() }

// API is the API id in request contexts and ARNs ("local" by default).
func (g *Gateway) API() string { return g.apiID() }

func (g *Gateway) stage() string {
	if g.Stage == "" {
		return "local"
	}
	return g.Stage
}

func (g *Gateway) apiID() string {
	if g.APIID == "" {
		return "local"
	}
	return g.APIID
}

// ServeHTTP routes management API calls and WebSocket upgrades.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/"+g.stage()+"/@connections/"); ok {
		g.serveManagement(w, r, rest)
		return
	}
	if r.URL.Path != "/" && r.URL.Path != "/"+g.stage() {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	g.serveWebSocket(w, r)
}

// Context returns the authorizer context of a live connection (what
// $connect's authorizer returned; nil if no such connection).
func (g *Gateway) Context(id string) map[string]any {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.conns[id]; c != nil {
		return c.authorizer
	}
	return nil
}

// Close closes every connection (each gets $disconnect) and waits for them.
// A connection still in its $connect handshake is closed as it completes.
func (g *Gateway) Close() {
	g.mu.Lock()
	g.closed = true
	g.baseLocked()
	g.cancelBase()
	g.mu.Unlock()
	g.wg.Wait()
}

// baseLocked returns the parent context of connection lifetimes; g.mu is held.
func (g *Gateway) baseLocked() context.Context {
	if g.base == nil {
		g.base, g.cancelBase = context.WithCancel(context.Background())
	}
	return g.base
}

// Connections returns the ids of the open connections.
func (g *Gateway) Connections() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := make([]string, 0, len(g.conns))
	for id := range g.conns {
		ids = append(ids, id)
	}
	return ids
}

func newID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.TrimRight(base64.URLEncoding.EncodeToString(b), "=")
}

func (g *Gateway) requestContext(c *conn, routeKey, eventType string) events.APIGatewayWebsocketProxyRequestContext {
	now := time.Now()
	return events.APIGatewayWebsocketProxyRequestContext{
		RouteKey:          routeKey,
		EventType:         eventType,
		ExtendedRequestID: newID(12),
		RequestTime:       now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
		MessageDirection:  "IN",
		Stage:             g.stage(),
		ConnectedAt:       c.connectedAt.UnixMilli(),
		RequestTimeEpoch:  now.UnixMilli(),
		Identity:          events.APIGatewayRequestIdentity{SourceIP: c.sourceIP},
		RequestID:         newID(12),
		DomainName:        "localhost",
		ConnectionID:      c.id,
		APIID:             g.apiID(),
		Authorizer:        c.authorizer,
	}
}

func (g *Gateway) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	c := &conn{id: newID(12), connectedAt: time.Now(), sourceIP: strings.Split(r.RemoteAddr, ":")[0], deleted: make(chan struct{})}
	c.lastActive = c.connectedAt
	ctx := r.Context()
	headers := map[string]string{}
	multi := map[string][]string{}
	for k, v := range r.Header {
		headers[k] = v[0]
		multi[k] = v
	}
	query := map[string]string{}
	for k, v := range r.URL.Query() {
		query[k] = v[0]
	}
	rc := g.requestContext(c, "$connect", "CONNECT")
	if g.Authorizer != nil {
		out, err := g.Authorizer(ctx, events.APIGatewayCustomAuthorizerRequestTypeRequest{
			Type:                  "REQUEST",
			MethodArn:             fmt.Sprintf("arn:aws:execute-api:local:000000000000:%s/%s/$connect", g.apiID(), g.stage()),
			Headers:               headers,
			MultiValueHeaders:     multi,
			QueryStringParameters: query,
			RequestContext: events.APIGatewayCustomAuthorizerRequestTypeRequestContext{
				Stage: g.stage(), RequestID: rc.RequestID, APIID: g.apiID(),
				Identity: events.APIGatewayCustomAuthorizerRequestTypeRequestIdentity{SourceIP: c.sourceIP},
			},
		})
		switch {
		case err != nil && err.Error() == "Unauthorized":
			http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
			return
		case err != nil:
			g.log().Error("authorizer failed", "err", err.Error())
			http.Error(w, `{"message":"Internal server error"}`, http.StatusInternalServerError)
			return
		case !allowed(out):
			http.Error(w, `{"message":"Forbidden"}`, http.StatusForbidden)
			return
		}
		c.authorizer = map[string]any{"principalId": out.PrincipalID}
		for k, v := range out.Context {
			c.authorizer[k] = v
		}
		rc.Authorizer = c.authorizer
	}
	// The connection exists from the start of $connect, but until $connect
	// succeeds PostToConnection answers 410 (ready is not yet closed).
	c.ready, c.connected = make(chan struct{}), make(chan struct{})
	g.mu.Lock()
	if g.conns == nil {
		g.conns = map[string]*conn{}
	}
	g.conns[c.id] = c
	g.mu.Unlock()
	forget := func() {
		close(c.ready)
		g.mu.Lock()
		delete(g.conns, c.id)
		g.mu.Unlock()
	}
	if route, ok := g.Routes["$connect"]; ok {
		resp, err := route.Handler(ctx, events.APIGatewayWebsocketProxyRequest{
			Headers: headers, MultiValueHeaders: multi, QueryStringParameters: query, RequestContext: rc, IsBase64Encoded: false,
		})
		if err != nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
			status := resp.StatusCode
			if err != nil || status == 0 {
				status = http.StatusInternalServerError
			}
			forget()
			http.Error(w, http.StatusText(status), status)
			return
		}
	}
	close(c.connected)
	g.mu.Lock()
	life, cancel := context.WithTimeout(g.baseLocked(), g.lifetime())
	g.mu.Unlock()
	ws, err := websocket.Accept(frameLimit{ResponseWriter: w, max: MaxFrameBytes}, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		forget()
		cancel()
		g.log().Warn("websocket upgrade failed", "err", err.Error())
		g.disconnect(c, "upgrade failed")
		return
	}
	ws.SetReadLimit(MaxMessageBytes)
	c.ws = ws
	c.out, c.gone = make(chan []byte, OutboundFrames), make(chan struct{})
	close(c.ready)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		cancel() // the gateway closed during the handshake: the read loop ends at once
	} else {
		g.wg.Add(1)
		g.mu.Unlock()
		defer g.wg.Done()
	}
	go g.writeLoop(c)
	g.readLoop(life, c)
	close(c.gone)
	cancel()
	g.mu.Lock()
	delete(g.conns, c.id)
	g.stats.ConnectionMs.Add(time.Since(c.connectedAt).Milliseconds())
	g.mu.Unlock()
	g.disconnect(c, "closed")
}

func allowed(out events.APIGatewayCustomAuthorizerResponse) bool {
	if len(out.PolicyDocument.Statement) == 0 {
		return false
	}
	for _, s := range out.PolicyDocument.Statement {
		if !strings.EqualFold(s.Effect, "Allow") {
			return false
		}
	}
	return true
}

func (g *Gateway) lifetime() time.Duration {
	if g.MaxLifetime > 0 {
		return g.MaxLifetime
	}
	return MaxLifetime
}

func (g *Gateway) idle() time.Duration {
	if g.IdleTimeout > 0 {
		return g.IdleTimeout
	}
	return IdleTimeout
}

// readLoop reads client messages and invokes their routes in order until
// the client closes, a limit is hit, or ctx ends.
func (g *Gateway) readLoop(ctx context.Context, c *conn) {
	idle := time.AfterFunc(g.idle(), func() { c.ws.Close(websocket.StatusGoingAway, "idle timeout") })
	defer idle.Stop()
	go func() {
		<-ctx.Done()
		c.ws.Close(websocket.StatusGoingAway, "connection lifetime reached")
	}()
	for {
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) || websocket.CloseStatus(err) != -1 || ctx.Err() != nil {
				return
			}
			g.log().Info("connection read ended", "connectionId", c.id, "err", err.Error())
			return
		}
		idle.Reset(g.idle())
		g.stats.Messages.Add(meterUnits(len(data)))
		c.mu.Lock()
		c.lastActive = time.Now()
		c.mu.Unlock()
		if typ != websocket.MessageText {
			// Signet's API takes JSON text frames only.
			c.ws.Close(websocket.StatusUnsupportedData, "binary frames are not supported")
			return
		}
		if g.Serial {
			g.dispatch(ctx, c, string(data))
			continue
		}
		// API Gateway invokes each frame's integration on its own: frames
		// of one connection run concurrently and finish in any order.
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.dispatch(ctx, c, string(data))
		}()
	}
}

// selectRoute applies $request.body.action: a JSON object whose "action" is
// a string naming a route selects it; anything else goes to $default.
func (g *Gateway) selectRoute(body string) string {
	var env struct {
		Action any `json:"action"`
	}
	if json.Unmarshal([]byte(body), &env) == nil {
		if a, ok := env.Action.(string); ok {
			if _, ok := g.Routes[a]; ok && !strings.HasPrefix(a, "$") {
				return a
			}
		}
	}
	return "$default"
}

func (g *Gateway) dispatch(ctx context.Context, c *conn, body string) {
	key := g.selectRoute(body)
	route, ok := g.Routes[key]
	if !ok {
		g.send(ctx, c, []byte(`{"message": "Forbidden", "connectionId":"`+c.id+`"}`))
		return
	}
	if route.Mock {
		return
	}
	rc := g.requestContext(c, key, "MESSAGE")
	rc.MessageID = newID(8)
	resp, err := route.Handler(ctx, events.APIGatewayWebsocketProxyRequest{Body: body, RequestContext: rc})
	if err != nil {
		g.log().Error("route handler failed", "route", key, "connectionId", c.id, "err", err.Error())
		g.send(ctx, c, []byte(`{"message": "Internal server error", "connectionId":"`+c.id+`", "requestId":"`+rc.RequestID+`"}`))
		return
	}
	if !route.Responds {
		return
	}
	if resp.Body == "" {
		// AWS sends a two-way route's empty response as an empty frame.
		g.stats.EmptyFrames.Add(1)
		g.log().Warn("empty route response sent as an empty frame", "route", key, "connectionId", c.id)
	}
	g.send(ctx, c, []byte(resp.Body))
}

func (g *Gateway) send(_ context.Context, c *conn, data []byte) {
	if len(data) > MaxMessageBytes {
		g.stats.OversizeFrames.Add(1)
		g.log().Error("route response over 128 KB not sent", "connectionId", c.id, "bytes", len(data))
		return
	}
	if !g.enqueue(c, data) {
		g.log().Info("route response not sent: the connection is gone", "connectionId", c.id)
	}
}

// OutboundFrames is how many frames a connection may have waiting for its
// socket: beyond that the client is not reading, and it is disconnected.
const OutboundFrames = 256

// enqueue hands a frame to the connection's writer, as API Gateway
// accepts a PostToConnection before the client has it. A full queue means
// the client stopped reading: it is disconnected (false: not accepted).
func (g *Gateway) enqueue(c *conn, data []byte) bool {
	select {
	case <-c.gone:
		return false
	case <-c.deleted:
		return false
	default:
	}
	// Metered before the hand-off: once the writer has the frame the client
	// may read it, and a reading taken after that must include it.
	units := meterUnits(len(data))
	g.stats.Messages.Add(units)
	select {
	case c.out <- data:
		return true
	case <-c.gone:
		g.stats.Messages.Add(-units)
		return false
	default:
		g.stats.Messages.Add(-units)
		g.slowConsumer(c, "its outbound queue is full")
		return false
	}
}

// writeLoop writes a connection's frames in order; a frame the socket does
// not take within the write timeout disconnects the client.
func (g *Gateway) writeLoop(c *conn) {
	for {
		select {
		case <-c.gone:
			return
		case <-c.deleted:
			for {
				select {
				case data := <-c.out:
					if !g.write(c, data) {
						return
					}
				default:
					c.ws.Close(websocket.StatusNormalClosure, "deleted by the backend")
					return
				}
			}
		case data := <-c.out:
			if !g.write(c, data) {
				return
			}
		}
	}
}

// write writes one frame within the write timeout; false when the
// connection is done for (a client that does not read is disconnected).
// The timer counts the slow consumer before it closes the socket, so the
// count is there before anything can see the connection gone.
func (g *Gateway) write(c *conn, data []byte) bool {
	timeout := g.writeTimeout()
	stuck := time.AfterFunc(timeout, func() {
		g.slowConsumer(c, "it did not take a frame within "+timeout.String())
	})
	err := c.ws.Write(context.Background(), websocket.MessageText, data)
	return stuck.Stop() && err == nil
}

func (g *Gateway) slowConsumer(c *conn, why string) {
	if c.slow.CompareAndSwap(false, true) {
		g.stats.SlowConsumers.Add(1)
		g.log().Warn("client disconnected: "+why, "connectionId", c.id)
	}
	c.ws.CloseNow()
}

func (g *Gateway) disconnect(c *conn, reason string) {
	route, ok := g.Routes["$disconnect"]
	if !ok {
		return
	}
	rc := g.requestContext(c, "$disconnect", "DISCONNECT")
	rc.DisconnectReason = &reason
	if _, err := route.Handler(context.Background(), events.APIGatewayWebsocketProxyRequest{RequestContext: rc}); err != nil {
		g.log().Error("$disconnect handler failed", "connectionId", c.id, "err", err.Error())
	}
}
