package app

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/signet-im/signet"
	signetcfg "github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/handler"
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
		saved := signetcfg.Needs["AckFunction"]
		signetcfg.Needs["AckFunction"] = append(append([]string{}, saved...), signetcfg.EnvRedeliveryQueue)
		defer func() { signetcfg.Needs["AckFunction"] = saved }()
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

// resourceKind says what kind of template resource an environment variable
// must reference.
var resourceKind = map[string]string{
	signetcfg.EnvConnectionsTable: "table",
	signetcfg.EnvInboxTable:       "table",
	signetcfg.EnvMessagesTable:    "table",
	signetcfg.EnvTraceTable:       "table",
	signetcfg.EnvAlertsTable:      "table",
	signetcfg.EnvRedeliveryQueue:  "queue",
	signetcfg.EnvFanoutQueue:      "queue",
	signetcfg.EnvPresenceQueue:    "queue",
}

// Drift lists every disagreement between the template and the code: a
// function, route, table, queue or environment variable present on one side
// only, or wired to the wrong thing. Empty means they agree.
func Drift(t *template.Template) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	fns := Functions(&handler.Deps{})
	for id := range fns {
		if _, ok := t.Functions[id]; !ok {
			add("function %s: in the code, not in the template", id)
		}
	}
	for id := range t.Functions {
		if _, ok := fns[id]; !ok {
			add("function %s: in the template, not in the code", id)
		}
	}
	for id, needs := range signetcfg.Needs {
		f, ok := t.Functions[id]
		if !ok {
			continue
		}
		for _, name := range needs {
			ref, set := f.Env[name]
			if !set {
				add("function %s: reads %s, which the template does not set", id, name)
				continue
			}
			switch resourceKind[name] {
			case "table":
				if _, ok := t.Tables[ref]; !ok {
					add("function %s: %s references %q, not a table of the template", id, name, ref)
				}
			case "queue":
				if _, ok := t.Queues[ref]; !ok {
					add("function %s: %s references %q, not a queue of the template", id, name, ref)
				}
			}
		}
	}
	for key, fn := range Routes {
		r, ok := t.Routes[key]
		switch {
		case !ok:
			add("route %s: served by the code, missing from the template", key)
		case r.Function != fn:
			add("route %s: template integrates %s, the code serves it with %s", key, r.Function, fn)
		case OneWay[key] && r.Responds:
			add("route %s: is one-way (its success answers nothing) but has a route response: API Gateway would send an empty frame", key)
		case key != "$connect" && key != "$disconnect" && !OneWay[key] && !r.Responds:
			add("route %s: needs a route response so its answers reach the caller", key)
		}
	}
	// Every change to the API must go live: a stage with AutoDeploy that
	// waits for every route and route response (a Deployment resource is
	// created once, and one created before a route response misses it).
	if len(t.Stages) != 1 {
		add("websocket api: want exactly one stage, the template has %d", len(t.Stages))
	}
	for id, st := range t.Stages {
		if st.AutoDeploy != "true" {
			add("stage %s: needs AutoDeploy: true, or later changes to routes never reach it", id)
		}
		if st.Deployment != "" {
			add("stage %s: names deployment %s; with AutoDeploy it must not", id, st.Deployment)
		}
		deps := map[string]bool{}
		for _, d := range st.DependsOn {
			deps[d] = true
		}
		for _, r := range t.RouteResources() {
			if !deps[r] {
				add("stage %s: does not depend on %s, so its first deployment may miss it", id, r)
			}
		}
		if st.AccessLogs {
			add("stage %s: access logs need the account's API Gateway CloudWatch role; they must be behind a condition, off by default", id)
		}
	}
	for id := range t.Deployments {
		add("deployment %s: is deployed once and never again; use the stage's AutoDeploy", id)
	}
	for key, r := range t.Routes {
		_, served := Routes[key]
		switch {
		case MockRoutes[key] && (!r.Mock || r.Responds):
			add("route %s: must be a one-way MOCK route (API Gateway answers it, invoking nothing)", key)
		case r.Mock && !MockRoutes[key]:
			add("route %s: is a MOCK route the code does not know", key)
		case !served && !MockRoutes[key]:
			add("route %s: in the template, not served by the code", key)
		}
	}
	for key := range MockRoutes {
		if _, ok := t.Routes[key]; !ok {
			add("route %s: API Gateway is to answer it, missing from the template", key)
		}
	}
	for key, fn := range HTTPRoutes {
		if got, ok := t.HTTPRoutes[key]; !ok {
			add("http route %s: served by the code, missing from the template", key)
		} else if got != fn {
			add("http route %s: template integrates %s, the code serves it with %s", key, got, fn)
		}
	}
	for key := range t.HTTPRoutes {
		if _, ok := HTTPRoutes[key]; !ok {
			add("http route %s: in the template, not served by the code", key)
		}
	}
	if r := t.Routes["$connect"]; r.Authorizer != "AuthorizerFunction" {
		add("route $connect: authorizer is %q, want AuthorizerFunction", r.Authorizer)
	}
	for fn, qs := range Triggers {
		f := t.Functions[fn]
		if got := slices.Sorted(slices.Values(f.SQSEvents)); !slices.Equal(got, slices.Sorted(slices.Values(qs))) {
			add("function %s: must be triggered by queues %v, template has %v", fn, qs, f.SQSEvents)
		} else if !f.ReportsBatchItemFailures {
			add("function %s: its SQS events must set FunctionResponseTypes [ReportBatchItemFailures]", fn)
		}
		for _, q := range qs {
			if _, ok := t.Queues[q]; !ok {
				add("queue %s: consumed by %s, missing from the template", q, fn)
			}
		}
	}
	sort.Strings(out)
	return out
}
