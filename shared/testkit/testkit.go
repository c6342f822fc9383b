// Package testkit holds the helpers tests of several packages share. Only
// _test.go files import it (arch_test.go: no command or function links it).
package testkit

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/memsqs"
)

// MemSQS starts an in-process memsqs for the test (stopped when it ends)
// and returns a real SDK client for it.
func MemSQS(t testing.TB) *sqs.Client {
	t.Helper()
	endpoint, stop, err := memsqs.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return sqs.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")},
		func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

// FreeAddr is a loopback address ("127.0.0.1:port") nothing listens on
// right now, for a process or server a test starts. The port is drawn at
// random from below the system's ephemeral range: a port in that range can
// be handed to another process's outgoing connection or ":0" listener
// between this check and the test's bind (a clean-clone CI run lost a
// stack's port so, with two test groups at once); one below it is taken
// only by a process that names it. Where the range cannot be read, or
// none of a few draws is free, the system picks one.
func FreeAddr(t testing.TB) string {
	t.Helper()
	if low := ephemeralLow(); low > minDrawnPort+1000 {
		for range 20 {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(minDrawnPort+rand.IntN(low-minDrawnPort)))
			if err == nil {
				defer ln.Close()
				return ln.Addr().String()
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// minDrawnPort is the lowest port FreeAddr draws: above the ports services
// on a developer's machine commonly name (LocalStack's 4566, moto's 5000,
// 8000 and 8080).
const minDrawnPort = 20000

// ephemeralLow is the first port of the system's ephemeral range (0 when
// it cannot be read: not Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, _ := strconv.Atoi(f[0])
	return low
}

// BurstSize is how many messages the crash/kill burst tests send: 300, or
// SIGNET_TEST_BURST, a multiple of 100 (make test-burst runs 1,000).
func BurstSize(t testing.TB) int {
	t.Helper()
	n := 300
	if v := os.Getenv("SIGNET_TEST_BURST"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 || n%100 != 0 {
			t.Fatalf("SIGNET_TEST_BURST=%q: want a multiple of 100", v)
		}
	}
	return n
}

// LargeTableEmulator is the in-process DynamoDB for the tests whose tables
// grow to hundreds of items or more (groups of 100 and 200 members, the
// kill bursts, the chaos runs): the one SIGNET_DYNAMODB_EMULATOR names, else
// memdyn. minidyn, the suite's default, answers every Query by scanning
// its table: those tests took 40–90 s each there under make test, and what
// they assert does not depend on the emulator. A DynamoDB endpoint the
// suite is given still wins over either.
func LargeTableEmulator() string {
	if v := os.Getenv("SIGNET_DYNAMODB_EMULATOR"); v != "" {
		return v
	}
	return "memdyn"
}

// ReadStoredThenFailed stores the first read and then fails it (the read
// function answers "internal"), as an invocation that stopped after its
// write, before the receipt and the read sync. Failed is set then.
type ReadStoredThenFailed struct {
	handler.Reads
	Failed *atomic.Bool
}

// MarkRead is the store's, failing the first one after it is stored.
func (r ReadStoredThenFailed) MarkRead(ctx context.Context, u im.UserID, c im.ConversationID, upTo int64, now time.Time) (int64, bool, error) {
	old, moved, err := r.Reads.MarkRead(ctx, u, c, upTo, now)
	if err == nil && r.Failed.CompareAndSwap(false, true) {
		return 0, false, errors.New("the invocation failed after storing the read")
	}
	return old, moved, err
}

// AckStoredThenFailed moves the first cursor an inbox ack moves and then
// fails it (the ack function answers "internal"), as an invocation that
// stopped after its write, before the delivered receipts. Failed is set
// then.
type AckStoredThenFailed struct {
	handler.Inbox
	Failed *atomic.Bool
}

// Ack is the store's, failing the first one that moved the cursor.
func (a AckStoredThenFailed) Ack(ctx context.Context, r im.AckRange) (im.AckResult, error) {
	res, err := a.Inbox.Ack(ctx, r)
	if err == nil && res.Moved && a.Failed.CompareAndSwap(false, true) {
		return im.AckResult{}, errors.New("the invocation failed after moving the cursor")
	}
	return res, err
}

// GroupChangeStoredThenFailed fails the first invocation of each group
// change with an op id once the change is stored (the group function
// answers "internal"), as an invocation that stopped after its write,
// before its answer, index and notices. Failed holds the op ids failed.
// WithoutOpID stores the changes without their op ids, as a server that
// knows none: a change sent again then answers that it changed nobody.
type GroupChangeStoredThenFailed struct {
	handler.Groups
	Failed      *sync.Map
	WithoutOpID bool
}

// ChangeMembers is the store's, failing each op id's first change that
// changed someone.
func (g GroupChangeStoredThenFailed) ChangeMembers(ctx context.Context, ch im.MemberChange) ([]im.Member, error) {
	opID := ch.OpID
	if g.WithoutOpID {
		ch.OpID = ""
	}
	changed, err := g.Groups.ChangeMembers(ctx, ch)
	if err == nil && opID != "" && len(changed) > 0 {
		if _, again := g.Failed.LoadOrStore(opID, true); !again {
			return nil, errors.New("the invocation failed after storing the change")
		}
	}
	return changed, err
}

// On is a devstack Configure hook that applies set to the dependencies of
// function fn only (the fakes above replace one function's store).
func On(fn string, set func(h *handler.Deps)) func(string, *handler.Deps) {
	return func(name string, h *handler.Deps) {
		if name == fn {
			set(h)
		}
	}
}
