package functions_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// initEnv is what every function's configuration needs to load (a
// superset: each reads its own part).
var initEnv = []string{
	"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
	"SIGNET_CONNECTIONS_TABLE=c", "SIGNET_INBOX_TABLE=i", "SIGNET_MESSAGES_TABLE=m", "SIGNET_TRACE_TABLE=t", "SIGNET_ALERTS_TABLE=a",
	"SIGNET_ADMIN_KEY=0123456789abcdef0123456789abcdef", "SIGNET_JWT_SECRET=0123456789abcdef0123456789abcdef0123",
	"SIGNET_REDELIVERY_QUEUE_URL=http://127.0.0.1:1/r", "SIGNET_FANOUT_QUEUE_URL=http://127.0.0.1:1/f",
	"SIGNET_PRESENCE_QUEUE_URL=http://127.0.0.1:1/p", "SIGNET_WS_ENDPOINT=http://127.0.0.1:1/local",
}

// BenchmarkInit is each function's init, as a cold start pays it: its
// bootstrap (built for this machine as for Lambda: -tags lambda.norpc,
// static, stripped) runs from process start until it asks for the Lambda
// Runtime API, which is absent here, so it exits. ns/op is process start,
// configuration and client set-up, and exit (README: "Bootstraps").
func BenchmarkInit(b *testing.B) {
	mains, err := filepath.Glob("*/main.go")
	if err != nil || len(mains) == 0 {
		b.Fatalf("no functions/*/main.go (%v)", err)
	}
	dir := b.TempDir()
	for _, m := range mains {
		name := filepath.Dir(m)
		bin := filepath.Join(dir, name)
		build(b, "./"+name, bin, lambdaBuild...)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(bin)
				cmd.Env = append(initEnv, "PATH="+os.Getenv("PATH"))
				out, _ := cmd.CombinedOutput()
				if !strings.Contains(string(out), "AWS_LAMBDA_RUNTIME_API") {
					b.Fatalf("%s did not reach the runtime API: %s", name, out)
				}
			}
		})
	}
}
