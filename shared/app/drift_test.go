package app

import (
	"slices"
	"strings"
	"testing"

	"github.com/signet-im/signet"
	signetcfg "github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/template"
)

func load(t *testing.T) *template.Template {
	t.Helper()
	tmpl, err := template.Parse(signet.Template)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func templateBytes(t *testing.T) []byte {
	t.Helper()
	return signet.Template
}

func TestTemplateAndCodeAgree(t *testing.T) {
	t.Parallel()
	if drift := Drift(load(t)); len(drift) > 0 {
		t.Fatalf("template and code disagree:\n%s", strings.Join(drift, "\n"))
	}
}

// Each removal, from either side, must be reported.
func TestDriftIsDetected(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*template.Template)
		want   string
	}{
		{"table removed from template", func(t *template.Template) { delete(t.Tables, "InboxTable") }, "not a table of the template"},
		{"queue removed from template", func(t *template.Template) { delete(t.Queues, "RedeliveryQueue") }, "RedeliveryQueue"},
		{"route removed from template", func(t *template.Template) { delete(t.Routes, "sync") }, "route sync: served by the code, missing"},
		{"env var removed from template", func(t *template.Template) { delete(t.Functions["SendFunction"].Env, signetcfg.EnvWebSocketAPI) }, "SendFunction: reads SIGNET_WS_ENDPOINT"},
		{"function removed from template", func(t *template.Template) { delete(t.Functions, "PingFunction") }, "function PingFunction: in the code, not in the template"},
		{"route wired to another function", func(t *template.Template) { r := t.Routes["ack"]; r.Function = "SyncFunction"; t.Routes["ack"] = r }, "route ack: template integrates SyncFunction"},
		{"route response removed", func(t *template.Template) { r := t.Routes["sync"]; r.Responds = false; t.Routes["sync"] = r }, "route sync: needs a route response"},
		{"extra route in template", func(t *template.Template) {
			t.Routes["teleport"] = template.Route{Key: "teleport", Function: "DefaultFunction"}
		}, "route teleport: in the template, not served"},
		{"one-way route given a route response", func(t *template.Template) { r := t.Routes["ack"]; r.Responds = true; t.Routes["ack"] = r }, "route ack: is one-way"},
		{"send given a route response", func(t *template.Template) { r := t.Routes["send"]; r.Responds = true; t.Routes["send"] = r }, "route send: is one-way"},
		{"stage without AutoDeploy", func(t *template.Template) {
			s := t.Stages["WebSocketStage"]
			s.AutoDeploy = ""
			t.Stages["WebSocketStage"] = s
		}, "stage WebSocketStage: needs AutoDeploy"},
		{"stage deployed before a route response exists", func(t *template.Template) {
			s := t.Stages["WebSocketStage"]
			s.DependsOn = slices.DeleteFunc(slices.Clone(s.DependsOn), func(d string) bool { return d == "SyncRouteResponse" })
			t.Stages["WebSocketStage"] = s
		}, "does not depend on SyncRouteResponse"},
		{"a deployment resource", func(t *template.Template) {
			t.Deployments["WebSocketDeployment"] = template.Deployment{LogicalID: "WebSocketDeployment"}
		}, "deployment WebSocketDeployment: is deployed once"},
		{"access logs always on", func(t *template.Template) {
			s := t.Stages["WebSocketStage"]
			s.AccessLogs = true
			t.Stages["WebSocketStage"] = s
		}, "access logs need the account's API Gateway CloudWatch role"},
		{"batch failures off", func(t *template.Template) {
			f := t.Functions["RedeliverFunction"]
			f.ReportsBatchItemFailures = false
			t.Functions["RedeliverFunction"] = f
		}, "ReportBatchItemFailures"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := load(t)
			tc.mutate(tmpl)
			drift := strings.Join(Drift(tmpl), "\n")
			if !strings.Contains(drift, tc.want) {
				t.Fatalf("drift report does not mention %q:\n%s", tc.want, drift)
			}
		})
	}
	// Code side: a variable the code starts to need but the template lacks.
	t.Run("env var added to the code only", func(t *testing.T) {
		saved := Needs["AckFunction"]
		Needs["AckFunction"] = append(append([]string{}, saved...), signetcfg.EnvRedeliveryQueue)
		defer func() { Needs["AckFunction"] = saved }()
		if drift := strings.Join(Drift(load(t)), "\n"); !strings.Contains(drift, "AckFunction: reads SIGNET_REDELIVERY_QUEUE_URL") {
			t.Fatalf("not reported:\n%s", drift)
		}
	})
	t.Run("route added to the code only", func(t *testing.T) {
		Routes["typing"] = "SummaryFunction"
		defer delete(Routes, "typing")
		if drift := strings.Join(Drift(load(t)), "\n"); !strings.Contains(drift, "route typing: served by the code, missing") {
			t.Fatalf("not reported:\n%s", drift)
		}
	})
}

// Issue 12: Lambda's START and REPORT lines are ~330 bytes of CloudWatch
// Logs ingestion per invocation, more than the functions' own log line per
// message. Every function keeps only WARN system logs (errors, timeouts);
// the cost benchmark prices platform lines by the same setting.
func TestEveryFunctionKeepsOnlyWarnSystemLogs(t *testing.T) {
	t.Parallel()
	for id, f := range load(t).Functions {
		if f.SystemLogLevel != "WARN" {
			t.Errorf("function %s: system log level %s, want WARN", id, f.SystemLogLevel)
		}
	}
}
