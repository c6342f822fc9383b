package app

import (
	"fmt"
	"slices"
	"sort"

	signetcfg "github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/handler"
	"github.com/signet-im/signet/shared/template"
)

// Routes maps every WebSocket route key the code serves to the function
// logical id that must serve it.
var Routes = map[string]string{
	"$connect":       "ConnectFunction",
	"$disconnect":    "DisconnectFunction",
	"$default":       "DefaultFunction",
	"send":           "SendFunction",
	"ack":            "AckFunction",
	"sync":           "SyncFunction",
	"ping":           "PingFunction",
	"read":           "ReadFunction",
	"history":        "HistoryFunction",
	"group":          "GroupFunction",
	"receipts":       "ReceiptsFunction",
	"presence":       "PresenceFunction",
	"presence.query": "PresenceFunction",
	"summary":        "SummaryFunction",
}

// OneWay are the routes that answer through @connections, not a route
// response: ack and read answer nothing on success (no frame to pay
// for); send posts its "sent" as soon as the message is durable, before
// any push, so a slow recipient never delays the sender's ACK. All push
// their error frames.
var OneWay = map[string]bool{"ack": true, "read": true, "send": true}

// HTTPRoutes maps every HTTP API route the code serves to its function.
var HTTPRoutes = map[string]string{
	"POST /v1/messages":           "AlertsFunction",
	"GET /v1/messages/{id}":       "AlertsFunction",
	"GET /v1/messages/{id}/trace": "AlertsFunction",
	"POST /v1/apps":               "AlertsFunction",
	"DELETE /v1/apps/{appId}":     "AlertsFunction",
}

// Queue triggers: function logical id → queue logical id it consumes.
var Triggers = map[string][]string{
	"RedeliverFunction": {"RedeliveryQueue"},
	"FanoutFunction":    {"FanoutQueue", "PresenceQueue"},
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
	fns := Functions(&handler.Handler{})
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
	for id, needs := range Needs {
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
	for key := range t.Routes {
		if _, ok := Routes[key]; !ok {
			add("route %s: in the template, not served by the code", key)
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
