package devstack_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/signet-im/signet/shared/devstack"
)

// A caller that found ports free (the SDK's and the console's test
// harnesses) passes them as the stack's listen addresses. Anything the
// stack itself binds first on a port the system picks — its SNS emulator,
// its clients' outgoing connections — could take one of them, so the
// named addresses are bound before the emulators start: when the first
// emulator reports in, both are already the stack's.
func TestNamedListenAddressesAreBoundBeforeTheEmulatorsStart(t *testing.T) {
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	addr, httpAddr := free(), free()
	var (
		mu      sync.Mutex
		checked bool
		freeAt  []string
	)
	progress := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if checked || !strings.HasPrefix(format, "dynamodb:") {
			return
		}
		checked = true
		for _, a := range []string{addr, httpAddr} {
			if ln, err := net.Listen("tcp", a); err == nil {
				ln.Close()
				freeAt = append(freeAt, a)
			}
		}
	}
	dynamoDB, sqsURL := testEndpoints()
	st, err := devstack.Start(context.Background(), devstack.Options{Addr: addr, HTTPAddr: httpAddr, Progress: progress,
		DynamoDBEndpoint: dynamoDB, SQSEndpoint: sqsURL, SNSEndpoint: testSNSEndpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mu.Lock()
	defer mu.Unlock()
	if !checked {
		t.Fatal("the stack reported no DynamoDB start")
	}
	if len(freeAt) > 0 {
		t.Fatalf("when DynamoDB started, %v could still be bound by anyone: the stack had not taken its named addresses yet", freeAt)
	}
	if !strings.Contains(st.URL, addr) || !strings.Contains(st.HTTPURL, httpAddr) {
		t.Fatalf("the stack listens at %s and %s, not at the named %s and %s", st.URL, st.HTTPURL, addr, httpAddr)
	}
}
