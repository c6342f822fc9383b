package signet_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps lists the packages pkg imports, transitively.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// Imports point inward: the domain knows no AWS, Lambda, JSON wire format
// or emulator.
func TestDomainImportsNoAdapters(t *testing.T) {
	t.Parallel()
	for _, d := range deps(t, "./shared/im") {
		for _, banned := range []string{"github.com/aws/", "github.com/signet-im/signet/shared/wire", "encoding/json", "minidyn", "goaws"} {
			if strings.Contains(d, banned) {
				t.Errorf("shared/im depends on %s", d)
			}
		}
	}
}

// The Lambda binaries must not link the emulators or the local stack.
func TestFunctionsDoNotLinkEmulators(t *testing.T) {
	t.Parallel()
	for _, d := range deps(t, "./functions/...") {
		for _, banned := range []string{"github.com/truora/minidyn", "github.com/Admiral-Piett/goaws", "shared/devstack", "shared/gateway", "shared/eventsource", "shared/testkit"} {
			if strings.Contains(d, banned) {
				t.Errorf("a function links %s", d)
			}
		}
	}
}

// Issue 13: handlers are use cases. They reach storage, queues and
// connections through their own interfaces and never import an adapter or
// the AWS SDK; the adapters own their codecs (the queue adapter decodes its
// messages and runs a batch: queue.Consumer).
func TestHandlersImportNoAdapter(t *testing.T) {
	t.Parallel()
	for _, d := range deps(t, "./shared/handler") {
		for _, banned := range []string{"github.com/aws/aws-sdk-go-v2", "github.com/aws/smithy-go", "shared/queue", "shared/dynamo", "shared/push", "shared/gateway", "shared/devstack", "shared/app"} {
			if strings.Contains(d, banned) {
				t.Errorf("shared/handler depends on %s", d)
			}
		}
	}
}

// The tests' shared helpers (shared/testkit) are linked by tests only.
func TestOnlyTestsLinkTheTestKit(t *testing.T) {
	t.Parallel()
	for _, d := range deps(t, "./cmd/...") {
		if strings.HasSuffix(d, "shared/testkit") {
			t.Errorf("a command links %s", d)
		}
	}
}

// The functions that call no AWS service start without SDK clients
// (shared/app/sdkfree), so their binaries link no SDK service: the
// authorizer runs on every $connect.
func TestFunctionsThatCallNoAWSLinkNoSDKService(t *testing.T) {
	t.Parallel()
	for _, fn := range []string{"./functions/authorizer", "./functions/default"} {
		for _, d := range deps(t, fn) {
			if strings.HasPrefix(d, "github.com/aws/aws-sdk-go-v2/service/") || strings.HasSuffix(d, "signet/shared/app") {
				t.Errorf("%s links %s", fn, d)
			}
		}
	}
}

// Issue 15: the web console and its token endpoint, which signs a token
// for whoever asks, exist only in `signet local`: no deployed function
// links them.
func TestNoFunctionLinksTheConsole(t *testing.T) {
	t.Parallel()
	for _, d := range deps(t, "./functions/...") {
		if strings.HasSuffix(d, "signet/shared/console") {
			t.Errorf("a function links %s", d)
		}
	}
	if !slices.Contains(deps(t, "./cmd/signet"), "github.com/signet-im/signet/shared/console") {
		t.Error("signet links no console: the test above checks nothing")
	}
}
