package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/coder/websocket"

	"github.com/signet-im/signet"
	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/template"
	"github.com/signet-im/signet/shared/testkit"
)

func TestProvisionCreatesEveryTemplateTableAndQueueIdempotently(t *testing.T) {
	ddbURL, stop, err := devstack.StartMinidyn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sqsURL, err := devstack.StartGoaws()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("prov%d", time.Now().UnixNano())
	args := []string{"provision", "--dynamodb-endpoint", ddbURL, "--sqs-endpoint", sqsURL, "--prefix", prefix}
	for round := range 2 {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("round %d: exit %d: %s%s", round, code, out.String(), errOut.String())
		}
		if round == 1 && !strings.Contains(out.String(), "exists") {
			t.Errorf("second run should find the tables:\n%s", out.String())
		}
	}
	tmpl, err := template.Parse(signet.Template)
	if err != nil {
		t.Fatal(err)
	}
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", "")}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ddbURL) })
	q := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(sqsURL) })
	ctx := context.Background()
	for id, tab := range tmpl.Tables {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(prefix + "-" + id)})
		if err != nil {
			t.Errorf("table %s: %v", id, err)
			continue
		}
		if got := aws.ToString(out.Table.KeySchema[0].AttributeName); got != tab.HashKey {
			t.Errorf("table %s hash key %s, want %s", id, got, tab.HashKey)
		}
	}
	for id := range tmpl.Queues {
		if _, err := q.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(prefix + "-" + id)}); err != nil {
			t.Errorf("queue %s: %v", id, err)
		}
	}
}

func TestProvisionWithoutEndpointIsAUsageError(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "")
	t.Setenv("AWS_ENDPOINT_URL_SQS", "")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"provision"}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, errOut.String())
	}
}

func TestTokenVerifiesWithTheLocalSecret(t *testing.T) {
	t.Setenv("SIGNET_JWT_SECRET", "")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"token", "alice", "--device", "laptop"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	c, err := auth.Verify([]byte(devstack.DefaultSecret), strings.TrimSpace(out.String()), time.Now())
	if err != nil || c.User != "alice" || c.Device != "laptop" {
		t.Fatalf("claims %+v, %v", c, err)
	}
	for _, args := range [][]string{{"token"}, {"token", "bad:user"}, {"nope"}} {
		if code := run(context.Background(), args, &out, &errOut); code == 0 {
			t.Errorf("%v: exit 0", args)
		}
	}
	if code := run(context.Background(), []string{"token", "--help"}, &out, &errOut); code != 0 {
		t.Errorf("--help: exit %d", code)
	}
}

// `signet local` serves the protocol, prints its URL and stops on cancel.
func TestLocalServesAndStopsCleanly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"local", "--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--dynamodb-addr", "127.0.0.1:0", "--sqs-addr", "127.0.0.1:0", "--console-addr", "127.0.0.1:0", "--prefix", fmt.Sprintf("cli%d", time.Now().UnixNano()), "--quiet"}, &out, &errOut)
	}()
	urlRE := regexp.MustCompile(`WebSocket API\s+(ws://\S+)\?token=`)
	var url string
	for url == "" { // the whole banner, however long a loaded machine takes
		select {
		case code := <-done:
			t.Fatalf("signet local exited %d before its banner:\n%s\n%s", code, out.String(), errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if m := urlRE.FindStringSubmatch(out.String()); m != nil && strings.Contains(out.String(), "Press Ctrl-C to stop.") {
			url = m[1]
		}
	}
	// Issue 14: without --data the banner says the data is in memory, and
	// the hints carry the addresses the stack really runs on.
	for _, want := range []string{"Data            in memory: lost when the stack stops", "signet chat --user alice --url " + url, "export SIGNET_URL=" + url} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in the banner:\n%s", want, out.String())
		}
	}
	// Issue 15: the web console, its files and its local-only token endpoint.
	m := regexp.MustCompile(`Web console\s+(http://\S+/)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no web console in the banner:\n%s", out.String())
	}
	tok := consoleChecks(t, m[1], url)
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	conn, _, err := websocket.Dial(dctx, url+"?token="+tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Write(dctx, websocket.MessageText, []byte(`{"action":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	if _, data, err := conn.Read(dctx); err != nil || !strings.HasPrefix(string(data), `{"type":"pong","head":0,"epoch":"`) {
		t.Fatalf("ping answer %s, %v", data, err)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(out.String(), "Stopped.") {
			t.Fatalf("exit %d:\n%s", code, out.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("signet local did not stop")
	}
}

// consoleChecks checks the web console at base and returns a token for
// alice from its token endpoint (which the caller's connection uses).
func consoleChecks(t *testing.T, base, wsURL string) string {
	t.Helper()
	get := func(path string) (string, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b), resp.Header.Get("Content-Type")
	}
	if page, _ := get(""); !strings.Contains(page, "<title>Signet console</title>") || !strings.Contains(page, `"@signet-im/client": "./sdk/index.js"`) {
		t.Errorf("the console's page:\n%s", page)
	}
	if js, typ := get("sdk/client.js"); !strings.Contains(js, "class SignetClient") || !strings.HasPrefix(typ, "text/javascript") {
		t.Errorf("the SDK module: %s, %.80q", typ, js)
	}
	if cfg, _ := get("config.json"); !strings.Contains(cfg, `"webSocketUrl":"`+wsURL+`"`) {
		t.Errorf("config.json %s; want the WebSocket URL %s", cfg, wsURL)
	}
	post := func(body string) (int, map[string]string) {
		resp, err := http.Post(base+"token", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	for _, bad := range []string{`{"userId":"app.monitoring"}`, `{"userId":""}`, `{"userId":"alice","deviceId":"a b"}`, `nope`} {
		if code, out := post(bad); code != http.StatusBadRequest || out["error"] == "" {
			t.Errorf("token for %s: %d %v; want 400 with an error", bad, code, out)
		}
	}
	code, out := post(`{"userId":"alice","deviceId":"laptop"}`)
	if code != http.StatusOK || out["token"] == "" {
		t.Fatalf("token: %d %v", code, out)
	}
	return out["token"]
}

// Issue 14: `signet --version` says which build this is (from the build
// information Go records), and exits 0.
func TestVersionNamesTheBuild(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--version", "version"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{arg}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "signet ") || !strings.Contains(out.String(), runtime.Version()) {
			t.Errorf("%s: exit %d, %q %q", arg, code, out.String(), errOut.String())
		}
	}
}

// Issue 14: the client commands take their WebSocket URL from SIGNET_URL
// when --url is not given.
func TestClientCommandsHonourSIGNET_URL(t *testing.T) {
	t.Setenv("SIGNET_URL", "ws://example.test:4001/")
	var cf clientFlags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	cf.register(fs, "d")
	if err := fs.Parse(nil); err != nil || cf.url != "ws://example.test:4001/" {
		t.Fatalf("url %q, %v; want SIGNET_URL's", cf.url, err)
	}
}

// Issue 14: a usage error says what was wrong on its first line (then where
// the usage is), instead of the whole usage text with the reason last.
func TestUsageErrorsSayWhatWasWrongFirst(t *testing.T) {
	t.Parallel()
	bobToken, _ := auth.Mint([]byte(devstack.DefaultSecret), "bob", "", time.Now(), time.Hour)
	bobPhoneToken, _ := auth.Mint([]byte(devstack.DefaultSecret), "bob", "phone", time.Now(), time.Hour)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "--user", "alice"}, "signet send: give --to and the text"},
		{[]string{"send", "--user", "a b", "--to", "bob", "hi"}, "signet send: --user is required"},
		{[]string{"token"}, "signet token: give one userId"},
		{[]string{"trace"}, "signet trace: give one messageId"},
		// Issue 14: a token of another user (or device) is refused before
		// anything is sent as that user.
		{[]string{"send", "--user", "alice", "--token", bobToken, "--to", "carol", "hi"}, "signet send: --token is bob's, not alice's (--user)"},
		{[]string{"tail", "--user", "bob", "--device", "laptop", "--token", bobPhoneToken}, "signet tail: --token is for device phone, not laptop (--device)"},
		{[]string{"send", "--user", "alice", "--token", "not-a-jwt", "--to", "carol", "hi"}, "signet send: --token is not a JWT"},
		{[]string{"chaos", "--churn", "1"}, "signet chaos: --churn 1 is not in [0, 1)"},
		{[]string{"chaos", "--presence", "-0.1"}, "signet chaos: --presence -0.1 is not in [0, 1)"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errOut)
		first, _, _ := strings.Cut(errOut.String(), "\n")
		if code != 2 || !strings.HasPrefix(first, tc.want) || strings.Contains(errOut.String(), "Usage:") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q first, no usage text", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// Issue 14: signet send's --timeout bounds the connect too (it waited a
// fixed 15 s before): with nothing listening it gives up within it and
// says so.
func TestSendTimeoutBoundsTheConnect(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	start := time.Now()
	code := run(context.Background(), []string{"send", "--user", "alice", "--to", "bob", "--url", "ws://" + testkit.FreeAddr(t) + "/", "--data", t.TempDir(), "--timeout", "1s", "hi"}, &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "could not connect to") || !strings.Contains(errOut.String(), "within 1s") {
		t.Fatalf("exit %d, %q; want a connect failure within 1s", code, errOut.String())
	}
	if took := time.Since(start); took >= 15*time.Second {
		t.Fatalf("took %s: the connect ignored --timeout", took)
	}
}

// Issue 14: make run takes the addresses and the data directory.
func TestMakeRunTakesAddressesAndData(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on this machine")
	}
	for _, tc := range []struct {
		vars []string
		want string
	}{
		{nil, "signet local --addr 127.0.0.1:3001 --http-addr 127.0.0.1:3000 --console-addr 127.0.0.1:3004 --data .signet/data"},
		{[]string{"ADDR=127.0.0.1:4001", "HTTP_ADDR=127.0.0.1:4000", "CONSOLE_ADDR=127.0.0.1:4004", "DATA=/tmp/d"}, "signet local --addr 127.0.0.1:4001 --http-addr 127.0.0.1:4000 --console-addr 127.0.0.1:4004 --data /tmp/d"},
		{[]string{"DATA="}, "signet local --addr 127.0.0.1:3001 --http-addr 127.0.0.1:3000 --console-addr 127.0.0.1:3004 \n"},
	} {
		out, err := exec.Command("make", append([]string{"-s", "-n", "-C", "../..", "run"}, tc.vars...)...).Output()
		if err != nil || !strings.Contains(string(out)+"\n", tc.want) {
			t.Errorf("make run %v: %q, %v; want %q", tc.vars, out, err, tc.want)
		}
	}
}
