package devstack_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/testkit"
)

// A caller that found ports free (the SDK's and the console's test
// harnesses) passes them as the stack's listen addresses. Anything the
// stack itself binds first on a port the system picks — its SNS emulator,
// its clients' outgoing connections — could take one of them, so the
// named addresses are bound before the emulators start: when the first
// emulator reports in, both are already the stack's.
func TestNamedListenAddressesAreBoundBeforeTheEmulatorsStart(t *testing.T) {
	// The free ports found here can be taken by another process on the
	// machine before the stack binds them (a clean-clone CI run, with two
	// test groups at once, lost one so): the stack then refuses to start,
	// and is started again on other ports.
	for attempt := 1; ; attempt++ {
		addr, httpAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
		freeAt, checked, err := startNamed(addr, httpAddr)
		if errors.Is(err, syscall.EADDRINUSE) && attempt < 3 {
			t.Logf("start: %v (a port was taken); starting again", err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !checked {
			t.Fatal("the stack reported no DynamoDB start")
		}
		if len(freeAt) > 0 {
			t.Fatalf("when DynamoDB started, %v could still be bound by anyone: the stack had not taken its named addresses yet", freeAt)
		}
		return
	}
}

// startNamed starts a stack listening at addr and httpAddr and closes it:
// which of the two could still be bound by anyone when the stack reported
// its DynamoDB start, and whether it reported it.
func startNamed(addr, httpAddr string) (freeAt []string, checked bool, err error) {
	var mu sync.Mutex
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
		return nil, false, err
	}
	defer st.Close()
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(st.URL, addr) || !strings.Contains(st.HTTPURL, httpAddr) {
		return nil, checked, fmt.Errorf("the stack listens at %s and %s, not at the named %s and %s", st.URL, st.HTTPURL, addr, httpAddr)
	}
	return freeAt, checked, nil
}
