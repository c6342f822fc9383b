// Package functions_test proves the Lambda artifacts themselves: each test
// builds a real bootstrap (-tags lambda.norpc, static) and runs it behind
// AWS's Lambda Runtime Interface Emulator, so lambda.Start, the handler's
// event decoding and the Runtime API loop are exercised as in Lambda.
package functions_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/signet-im/signet/shared/testkit"
)

// The emulator is built once per test binary (a go tool dependency in go.mod).
var (
	rieOnce sync.Once
	rieBin  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if rieBin != "" {
		os.Remove(rieBin)
	}
	os.Exit(code)
}

// lambdaBuild are the Makefile's flags for a Lambda artifact (lambda-%,
// LAMBDA_GCFLAGS): no RPC shim, stripped, and our and the AWS SDK's packages
// compiled without inlining.
var lambdaBuild = []string{"-tags", "lambda.norpc", "-trimpath", "-ldflags", "-s -w",
	"-gcflags=github.com/signet-im/signet/...=-l", "-gcflags=github.com/aws/...=-l"}

// TestLambdaBuildIsTheMakefiles holds lambdaBuild to the Makefile's
// lambda-% rule, which sam build runs, so the artifacts these tests run are
// the ones deployed.
func TestLambdaBuildIsTheMakefiles(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var gcflags, rule string
	for _, line := range strings.Split(string(mk), "\n") {
		if v, ok := strings.CutPrefix(line, "LAMBDA_GCFLAGS := "); ok {
			gcflags = v
		}
		if strings.Contains(line, "$(GO) build -tags lambda.norpc") {
			rule = line
		}
	}
	if want := strings.Join(lambdaBuild[5:], " "); gcflags != want {
		t.Errorf("Makefile LAMBDA_GCFLAGS = %q, lambdaBuild has %q", gcflags, want)
	}
	if !strings.Contains(rule, `-tags lambda.norpc -trimpath -ldflags "-s -w" $(LAMBDA_GCFLAGS)`) {
		t.Errorf("Makefile's lambda-%% rule %q is not lambdaBuild's flags", rule)
	}
}

func build(t testing.TB, dir, out string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", append(append([]string{"build"}, args...), "-o", out, dir)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, b)
	}
}

// invoke runs bootstrap under the RIE with env and sends one event.
func invoke(t *testing.T, bootstrap string, env []string, event any) []byte {
	t.Helper()
	rieOnce.Do(func() {
		rieBin = filepath.Join(os.TempDir(), fmt.Sprintf("signet-rie-%d", os.Getpid()))
		build(t, "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie", rieBin)
	})
	body, _ := json.Marshal(event)
	// A free port found here can be taken by another test's process before
	// the RIE binds it (a clean-clone CI run lost one so): the RIE then
	// exits at once, and is started again on other ports.
	for attempt := 1; ; attempt++ {
		out, logs, err := invokeOnce(t, bootstrap, env, body)
		if err == nil {
			return out
		}
		if attempt < 3 && strings.Contains(logs, "address already in use") {
			t.Logf("invoke: %v (a port was taken); starting again", err)
			continue
		}
		t.Fatalf("invoke: %v\nlogs:\n%s", err, logs)
	}
}

// invokeOnce starts the RIE on two free ports and posts body to it: the
// response, or an error with the RIE's logs.
func invokeOnce(t *testing.T, bootstrap string, env []string, body []byte) ([]byte, string, error) {
	t.Helper()
	addr, apiAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	cmd := exec.Command(rieBin, "--runtime-interface-emulator-address", addr, "--runtime-api-address", apiAddr, "--log-level", "error", bootstrap)
	cmd.Env = append(os.Environ(), env...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	url := fmt.Sprintf("http://%s/2015-03-31/functions/function/invocations", addr)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		if err == nil {
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return out, "", nil
		}
		select {
		case <-exited:
			return nil, logs.String(), fmt.Errorf("the RIE exited: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return nil, logs.String(), err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDefaultFunctionArtifactAnswersThroughTheRuntimeAPI(t *testing.T) {
	bootstrap := filepath.Join(t.TempDir(), "bootstrap")
	build(t, "./default", bootstrap, lambdaBuild...)
	event := map[string]any{
		"body": `{"action":"teleport"}`,
		"requestContext": map[string]any{
			"routeKey": "$default", "eventType": "MESSAGE", "connectionId": "c1", "requestId": "r1",
			"authorizer": map[string]any{"userId": "alice", "deviceId": "laptop", "principalId": "alice"},
		},
	}
	out := invoke(t, bootstrap, []string{"AWS_REGION=us-east-1"}, event)
	var resp struct {
		StatusCode int    `json:"statusCode"`
		Body       string `json:"body"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("response %s: %v", out, err)
	}
	if resp.StatusCode != 200 || !strings.Contains(resp.Body, `"code":"unknown_action"`) || !strings.Contains(resp.Body, `"requestId":"r1"`) {
		t.Fatalf("response = %s", out)
	}
}

func TestAuthorizerArtifactAllowsAndDenies(t *testing.T) {
	bootstrap := filepath.Join(t.TempDir(), "bootstrap")
	build(t, "./authorizer", bootstrap, "-tags", "lambda.norpc", "-trimpath")
	out := invoke(t, bootstrap, []string{"AWS_REGION=us-east-1", "SIGNET_JWT_SECRET=s"}, map[string]any{
		"type": "REQUEST", "methodArn": "arn:aws:execute-api:us-east-1:1:api/prod/$connect",
		"queryStringParameters": map[string]string{"token": "not-a-jwt"},
	})
	if !strings.Contains(string(out), `"Effect":"Deny"`) {
		t.Fatalf("bad token not denied: %s", out)
	}
}
