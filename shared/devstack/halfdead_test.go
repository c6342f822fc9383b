package devstack_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/coder/websocket"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/push"
	"github.com/signet-im/signet/shared/wire"
)

// stuckPusher models a recipient whose socket stopped reading (no FIN, no
// RST): every push to that user's connections hangs until the caller's
// deadline. It also records, in order, which frames were posted.
type stuckPusher struct {
	handler.Pusher
	stack   *atomic.Pointer[devstack.Stack] // set once the stack runs
	stuck   string
	mu      *sync.Mutex
	order   *[]string // "sent" and "push:<user>" as posted
	blocked *atomic.Int64
}

func (p *stuckPusher) Push(ctx context.Context, id im.ConnectionID, data []byte) error {
	var user string
	if st := p.stack.Load(); st != nil {
		user, _ = st.Gateway.Context(string(id))[handler.ContextUser].(string)
	}
	p.mu.Lock()
	if bytes.HasPrefix(data, []byte(`{"type":"sent"`)) {
		*p.order = append(*p.order, "sent")
	} else if bytes.HasPrefix(data, []byte(`{"type":"message"`)) {
		*p.order = append(*p.order, "push:"+user)
	}
	p.mu.Unlock()
	if user == p.stuck {
		p.blocked.Add(1)
		defer p.blocked.Add(-1)
		<-ctx.Done()
		return ctx.Err()
	}
	return p.Pusher.Push(ctx, id, data)
}

// A recipient that stops reading must hold nothing hostage: the sender's
// "sent" is posted before any push, every push to the stuck recipient
// ends at the push deadline (no invocation runs into its timeout), other
// users keep getting their messages, and group fan-out goes on.
func TestHalfDeadRecipientDelaysNoOne(t *testing.T) {
	t.Parallel()
	var (
		stack   atomic.Pointer[devstack.Stack]
		mu      sync.Mutex
		order   []string
		blocked atomic.Int64
	)
	st := startStack(t, devstack.Options{Configure: func(_ string, h *handler.Deps) {
		if h.Pusher != nil {
			h.PushDeadline = 2 * time.Second
			h.Pusher = &stuckPusher{Pusher: h.Pusher, stack: &stack, stuck: "vic", mu: &mu, order: &order, blocked: &blocked}
		}
	}})
	stack.Store(st)
	alice := dial(t, st, "alice", "laptop")
	bob := dial(t, st, "bob", "laptop")
	carol := dial(t, st, "carol", "laptop")
	dial(t, st, "vic", "phone") // connected; every push to it hangs

	var g wire.GroupInfo
	alice.request(map[string]any{"action": "group", "op": "create", "conversationId": "g:ops", "name": "Ops", "users": []string{"carol", "vic"}}, &g)

	// alice → vic: the ACK comes first, then the (stuck) pushes.
	alice.send("to-vic-1", "vic", "are you there?")
	if f := alice.next("sent", 10*time.Second); f.ClientMsgID != "to-vic-1" {
		t.Fatalf("sent %+v", f)
	}
	mu.Lock()
	if len(order) == 0 || order[0] != "sent" {
		t.Errorf("frames posted in this order: %v; the sender's sent must go before any push", order)
	}
	mu.Unlock()
	// Meanwhile bob → carol and the group are unaffected.
	bob.send("to-carol", "carol", "hi carol")
	bob.next("sent", 10*time.Second)
	if f := carol.next("message", 10*time.Second); f.Seq == 0 {
		t.Fatalf("carol's push %+v", f)
	}
	alice.sendTo("g-1", g.ConversationID, "incident 42")
	for { // a "message" (write diffusion) or a "groupMessage" (read)
		f := carol.nextOf(30*time.Second, "message", wire.TypeGroupMessage)
		if _, _, body := f.pushed(t); body == `"incident 42"` {
			break
		}
	}
	// Every stuck push ends at the push deadline: nothing waits for the
	// recipient, and no function ran into its Lambda timeout.
	waitFor(t, "stuck pushes given up", func() bool { return blocked.Load() == 0 })
	if l := st.Limits(); len(l.Timeouts) > 0 {
		t.Fatalf("invocations timed out behind a stuck recipient: %v", l.Timeouts)
	}
	// What vic missed waits in the inbox (the group's message, under read
	// diffusion, in the group's log).
	want := int64(2)
	if st.Config.GroupReads {
		want = 1
	}
	if head, _, err := st.Store.Head(context.Background(), "vic"); err != nil || head != want {
		t.Fatalf("vic's inbox head %d (%v), want %d", head, err, want)
	}
}

// On the wire: a client whose socket stops reading is disconnected once a
// frame cannot be written within the gateway's write timeout, and the
// PostToConnection answers 410 instead of hanging.
func TestGatewayDisconnectsAClientThatStopsReading(t *testing.T) {
	t.Parallel()
	st := startStack(t, devstack.Options{WriteTimeout: time.Second})
	// A tiny receive buffer fills fast; the client never reads.
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, st.URL+"?token="+token(t, "vic", "phone"), &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	var id im.ConnectionID
	waitFor(t, "vic's connection record", func() bool {
		conns, err := st.Store.Connections(ctx, "vic")
		if err == nil && len(conns) == 1 {
			id = conns[0].ID
		}
		return id != ""
	})
	mgmt := apigatewaymanagementapi.New(apigatewaymanagementapi.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(st.ManagementURL),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	pusher := push.New(mgmt)
	// The record is saved inside $connect; until the handler returns, the
	// gateway answers a post 410 as API Gateway does. A small post that is
	// accepted shows the handshake is over.
	waitFor(t, "vic's connection open at the gateway", func() bool {
		return pusher.Push(ctx, id, []byte(`{"type":"hello"}`)) == nil
	})
	frame := []byte(`{"type":"filler","pad":"` + strings.Repeat("x", 100<<10) + `"}`)
	gone := false
	for i := 0; i < 400 && !gone; i++ {
		err := pusher.Push(ctx, id, frame)
		switch {
		case err == nil:
		case strings.Contains(err.Error(), im.ErrGone.Error()):
			gone = true
		default:
			t.Fatalf("push %d: %v", i, err)
		}
	}
	if !gone || st.Gateway.SlowConsumers() != 1 {
		t.Fatalf("after filling the socket: gone %v, slow consumers %d; want the client disconnected", gone, st.Gateway.SlowConsumers())
	}
}
