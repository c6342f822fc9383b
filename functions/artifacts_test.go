package functions_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/signet-im/signet"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/template"
)

// sampleEvent reads one of AWS's own event samples, as aws-lambda-go ships
// them in events/testdata (real shapes captured from API Gateway and SQS).
func sampleEvent(t *testing.T, name string) map[string]any {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/aws/aws-lambda-go").Output()
	if err != nil {
		t.Fatalf("locate aws-lambda-go: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "events", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ev
}

// Every one of the template's functions is built as `sam build` builds it
// (its own functions/<dir>, linux, static, -tags lambda.norpc), started by
// AWS's Runtime Interface Emulator with exactly the environment the
// template gives it (resolved against a local stack's tables, queues and
// @connections endpoint), and answers one of AWS's sample events for its
// trigger through the Runtime API. This proves each artifact's init
// (configuration load and checks) with its template environment, its
// lambda.Start wiring and its event decoding; it does not prove IAM (the
// local stack's end-to-end suite does) nor anything of AWS's own services.
func TestEveryArtifactStartsWithItsTemplateEnvironmentAndAnswersASampleEvent(t *testing.T) {
	tmpl, err := template.Parse(signet.Template)
	if err != nil {
		t.Fatal(err)
	}
	st, err := devstack.Start(context.Background(), devstack.Options{Prefix: fmt.Sprintf("rt%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	dirs := map[string]string{} // logical id → functions/<dir>
	entries, _ := os.ReadDir(".")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(e.Name(), "main.go"))
		if err != nil {
			continue
		}
		for id := range tmpl.Functions {
			if strings.Contains(string(b), `app.Start("`+id+`",`) || strings.Contains(string(b), `sdkfree.Start("`+id+`",`) {
				dirs[id] = e.Name()
			}
		}
	}
	routesOf := map[string]string{}
	for key, r := range tmpl.Routes {
		routesOf[r.Function] = key
	}
	httpOf := map[string]string{}
	for key, fn := range tmpl.HTTPRoutes {
		httpOf[fn] = key
	}
	ids := make([]string, 0, len(tmpl.Functions))
	for id := range tmpl.Functions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(ids) != 19 {
		t.Fatalf("the template has %d functions, this test knows 19", len(ids))
	}
	for _, id := range ids {
		f := tmpl.Functions[id]
		t.Run(id, func(t *testing.T) {
			dir, ok := dirs[id]
			if !ok {
				t.Fatalf("no functions/<dir>/main.go starts %s", id)
			}
			bootstrap := filepath.Join(t.TempDir(), "bootstrap")
			build(t, "./"+dir, bootstrap, lambdaBuild...)
			env := []string{"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local",
				"AWS_ENDPOINT_URL_DYNAMODB=" + st.DynamoDBEndpoint, "AWS_ENDPOINT_URL_SQS=" + st.SQSEndpoint, "AWS_ENDPOINT_URL_SNS=" + st.SNSEndpoint}
			for k, v := range st.FunctionEnv(id) {
				env = append(env, k+"="+v)
			}
			var event map[string]any
			var check func(out map[string]any) error
			switch {
			case id == "AuthorizerFunction":
				event = sampleEvent(t, "apigw-v2-custom-authorizer-v1-request.json")
				event["queryStringParameters"] = map[string]any{"token": "not-a-jwt"}
				check = func(out map[string]any) error {
					if !strings.Contains(fmt.Sprint(out), "Deny") {
						return fmt.Errorf("a bad token was not denied")
					}
					return nil
				}
			case len(f.SQSEvents) > 0:
				event = sampleEvent(t, "sqs-event.json")
				check = func(out map[string]any) error {
					// The sample bodies are no Signet jobs: the consumer
					// answers a partial batch response (it drops a job that
					// can never succeed, loudly), never a failed batch.
					if _, ok := out["batchItemFailures"]; !ok {
						return fmt.Errorf("want an SQSEventResponse (batchItemFailures)")
					}
					return nil
				}
			case httpOf[id] != "":
				event = sampleEvent(t, "apigw-v2-request-no-authorizer.json")
				method, path, _ := strings.Cut(httpOf[id], " ")
				event["routeKey"] = httpOf[id]
				event["rawPath"] = path
				rc := event["requestContext"].(map[string]any)
				rc["routeKey"] = httpOf[id]
				rc["http"].(map[string]any)["method"] = method
				rc["http"].(map[string]any)["path"] = path
				check = func(out map[string]any) error {
					if out["statusCode"] != float64(401) {
						return fmt.Errorf("a request without a key: want 401")
					}
					return nil
				}
			case routesOf[id] != "":
				key := routesOf[id]
				name := "apigw-websocket-request-send-message.json"
				if key == "$connect" {
					name = "apigw-websocket-request.json"
				} else if key == "$disconnect" {
					name = "apigw-websocket-request-disconnect.json"
				}
				event = sampleEvent(t, name)
				rc := event["requestContext"].(map[string]any)
				rc["routeKey"] = key
				rc["authorizer"] = map[string]any{"principalId": "alice", "userId": "alice", "deviceId": "laptop"}
				check = func(out map[string]any) error {
					if out["statusCode"] != float64(200) {
						return fmt.Errorf("want statusCode 200")
					}
					body, _ := out["body"].(string)
					if tmpl.Routes[key].Responds && !strings.HasPrefix(body, `{"type":`) {
						return fmt.Errorf("a two-way route answered no frame")
					}
					return nil
				}
			default:
				t.Fatalf("%s: no trigger in the template", id)
			}
			raw := invoke(t, bootstrap, env, event)
			var out map[string]any
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatalf("response %s: %v", raw, err)
			}
			if _, failed := out["errorType"]; failed {
				t.Fatalf("invocation failed: %s", raw)
			}
			if err := check(out); err != nil {
				t.Fatalf("%v: %s", err, raw)
			}
		})
	}
}
