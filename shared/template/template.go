// Package template reads Signet's SAM template (template.yaml), the one
// source of truth for tables, queues, functions and WebSocket routes. The
// local stack and the provisioning command create resources from it; the
// drift tests compare it with the code.
package template

import (
	"cmp"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Template is the part of a SAM template Signet reads.
type Template struct {
	Tables    map[string]Table    // by logical id
	Queues    map[string]Queue    // by logical id
	Functions map[string]Function // by logical id
	Routes    map[string]Route    // by route key
	// HTTPRoutes maps "METHOD /path" of HttpApi events to function logical ids.
	HTTPRoutes map[string]string
	// Parameters by name.
	Parameters map[string]Parameter
	// Deployments are the AWS::ApiGatewayV2::Deployment resources of the
	// WebSocket API.
	Deployments map[string]Deployment
	// Stages are the AWS::ApiGatewayV2::Stage resources.
	Stages map[string]Stage

	rules          map[string]*yaml.Node
	routeIDs       []string // logical ids of the WebSocket routes
	routeResponses []string // logical ids of their route responses
}

// RouteResources returns the logical ids of every WebSocket route and
// route response: what a deployment must include.
func (t *Template) RouteResources() []string {
	out := append(append([]string{}, t.routeIDs...), t.routeResponses...)
	sort.Strings(out)
	return out
}

// Deployment is an AWS::ApiGatewayV2::Deployment.
type Deployment struct {
	LogicalID string
	DependsOn []string
}

// Stage is an AWS::ApiGatewayV2::Stage.
type Stage struct {
	LogicalID string
	// AutoDeploy is the stage's AutoDeploy property ("" when unset).
	AutoDeploy string
	// Deployment is the logical id its DeploymentId references.
	Deployment string
	// AccessLogs is true when the stage sets AccessLogSettings without a
	// condition that can switch them off.
	AccessLogs bool
	// DependsOn lists the resources the stage waits for.
	DependsOn []string
}

// Table is an AWS::DynamoDB::Table.
type Table struct {
	LogicalID  string
	Attributes map[string]string // attribute name → type (S, N, B)
	HashKey    string
	RangeKey   string
	TTL        string // TTL attribute, "" when none
	// Class is the table class: "STANDARD" (also when the template names
	// none) or "STANDARD_INFREQUENT_ACCESS".
	Class string
}

// Queue is an AWS::SQS::Queue.
type Queue struct {
	LogicalID         string
	VisibilityTimeout int    // seconds, 0 = SQS default
	RetentionPeriod   int    // seconds, 0 = SQS default
	DeadLetterQueue   string // logical id of the redrive target, "" when none
	MaxReceiveCount   int
}

// Function is an AWS::Serverless::Function.
type Function struct {
	LogicalID string
	// Env is every environment variable set on the function (Globals
	// included) → the logical id it references, or "" for other values.
	Env map[string]string
	// SQSEvents lists the logical ids of queues that trigger the function.
	SQSEvents []string
	// ReportsBatchItemFailures is true when every SQS event mapping sets
	// FunctionResponseTypes: [ReportBatchItemFailures].
	ReportsBatchItemFailures bool
	// Timeout is the function's timeout in seconds (Globals or its own;
	// Lambda's default of 3 when neither sets it).
	Timeout int
	// MemorySize is the function's memory in MB (Globals or its own;
	// Lambda's default of 128 when neither sets it).
	MemorySize int
	// MaximumConcurrency is the ScalingConfig.MaximumConcurrency of each
	// SQS event mapping, by queue logical id (0: unset).
	MaximumConcurrency map[string]int
	// BatchSize of each SQS event mapping by queue logical id (0: unset).
	BatchSize map[string]int
	// SystemLogLevel is the level of Lambda's own log lines the function
	// keeps (LoggingConfig, its own or Globals'; Lambda's default INFO,
	// which writes START and REPORT lines for every invocation).
	SystemLogLevel string

	envNodes map[string]*yaml.Node
	policies *yaml.Node
}

// Route is an AWS::ApiGatewayV2::Route with its Lambda integration.
type Route struct {
	Key      string
	Function string // logical id of the integration's function ("" for a mock)
	// Mock is true for a MOCK integration: API Gateway answers the route
	// itself and invokes nothing (with no route response, it answers
	// nothing: the frame only keeps the connection from idling out).
	Mock bool
	// Authorizer is the logical id of the authorizer function, if any.
	Authorizer string
	// Responds is true when the route has a route response (two-way).
	Responds bool
}

// Load parses the template at path.
func Load(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read template: %w", err)
	}
	return Parse(b)
}

var (
	refSub      = regexp.MustCompile(`\$\{([A-Za-z0-9]+)(?:\.Arn)?\}`)
	integration = regexp.MustCompile(`^integrations/\$\{([A-Za-z0-9]+)\}$`)
)

// Parse reads a template from YAML bytes.
func Parse(b []byte) (*Template, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("parse template: empty document")
	}
	root := doc.Content[0]
	t := &Template{Tables: map[string]Table{}, Queues: map[string]Queue{}, Functions: map[string]Function{}, Routes: map[string]Route{},
		HTTPRoutes: map[string]string{}, Deployments: map[string]Deployment{}, Stages: map[string]Stage{}, rules: map[string]*yaml.Node{}}
	t.Parameters = parseParameters(get(root, "Parameters"))
	if rules := get(root, "Rules"); rules != nil {
		for i := 0; i+1 < len(rules.Content); i += 2 {
			t.rules[rules.Content[i].Value] = rules.Content[i+1]
		}
	}
	globals := get(get(root, "Globals"), "Function")
	globalVars := get(get(globals, "Environment"), "Variables")
	globalEnv := envOf(globalVars)
	globalTimeout, err := strconv.Atoi(scalar(get(globals, "Timeout")))
	if err != nil {
		globalTimeout = 3 // Lambda's default
	}
	globalMemory, err := strconv.Atoi(scalar(get(globals, "MemorySize")))
	if err != nil {
		globalMemory = 128 // Lambda's default
	}
	globalSystemLog := cmp.Or(scalar(get(get(globals, "LoggingConfig"), "SystemLogLevel")), "INFO")
	resources := get(root, "Resources")
	if resources == nil {
		return nil, fmt.Errorf("parse template: no Resources")
	}
	integrations := map[string]string{} // integration id → function id
	mocks := map[string]bool{}          // MOCK integration ids
	authorizers := map[string]string{}  // authorizer id → function id
	type rawRoute struct{ key, target, authorizer string }
	var routes []rawRoute
	responses := map[string]bool{}  // route logical id → has response
	routeIDs := map[string]string{} // route logical id → key
	for i := 0; i+1 < len(resources.Content); i += 2 {
		id, res := resources.Content[i].Value, resources.Content[i+1]
		props := get(res, "Properties")
		switch scalar(get(res, "Type")) {
		case "AWS::DynamoDB::Table":
			tab := Table{LogicalID: id, Attributes: map[string]string{}}
			for _, a := range seq(get(props, "AttributeDefinitions")) {
				tab.Attributes[scalar(get(a, "AttributeName"))] = scalar(get(a, "AttributeType"))
			}
			for _, k := range seq(get(props, "KeySchema")) {
				if scalar(get(k, "KeyType")) == "HASH" {
					tab.HashKey = scalar(get(k, "AttributeName"))
				} else {
					tab.RangeKey = scalar(get(k, "AttributeName"))
				}
			}
			if ttl := get(props, "TimeToLiveSpecification"); scalar(get(ttl, "Enabled")) == "true" {
				tab.TTL = scalar(get(ttl, "AttributeName"))
			}
			if tab.Class = scalar(get(props, "TableClass")); tab.Class == "" {
				tab.Class = "STANDARD"
			}
			t.Tables[id] = tab
		case "AWS::SQS::Queue":
			q := Queue{LogicalID: id}
			q.VisibilityTimeout, _ = strconv.Atoi(scalar(get(props, "VisibilityTimeout")))
			q.RetentionPeriod, _ = strconv.Atoi(scalar(get(props, "MessageRetentionPeriod")))
			if rp := get(props, "RedrivePolicy"); rp != nil {
				q.DeadLetterQueue = refOf(get(rp, "deadLetterTargetArn"))
				q.MaxReceiveCount, _ = strconv.Atoi(scalar(get(rp, "maxReceiveCount")))
			}
			t.Queues[id] = q
		case "AWS::Serverless::Function":
			f := Function{LogicalID: id, Env: map[string]string{}, ReportsBatchItemFailures: true, Timeout: globalTimeout,
				MaximumConcurrency: map[string]int{}, BatchSize: map[string]int{}, envNodes: map[string]*yaml.Node{}, policies: get(props, "Policies")}
			if v, err := strconv.Atoi(scalar(get(props, "Timeout"))); err == nil {
				f.Timeout = v
			}
			f.MemorySize = globalMemory
			f.SystemLogLevel = cmp.Or(scalar(get(get(props, "LoggingConfig"), "SystemLogLevel")), globalSystemLog)
			if v, err := strconv.Atoi(scalar(get(props, "MemorySize"))); err == nil {
				f.MemorySize = v
			}
			ownVars := get(get(props, "Environment"), "Variables")
			for _, vars := range []*yaml.Node{globalVars, ownVars} {
				for j := 0; vars != nil && j+1 < len(vars.Content); j += 2 {
					f.envNodes[vars.Content[j].Value] = vars.Content[j+1]
				}
			}
			for k, v := range globalEnv {
				f.Env[k] = v
			}
			for k, v := range envOf(ownVars) {
				f.Env[k] = v
			}
			events := get(props, "Events")
			for j := 0; events != nil && j+1 < len(events.Content); j += 2 {
				ev := events.Content[j+1]
				if scalar(get(ev, "Type")) == "HttpApi" {
					ep := get(ev, "Properties")
					t.HTTPRoutes[strings.ToUpper(scalar(get(ep, "Method")))+" "+scalar(get(ep, "Path"))] = id
					continue
				}
				if scalar(get(ev, "Type")) != "SQS" {
					continue
				}
				ep := get(ev, "Properties")
				q := refOf(get(ep, "Queue"))
				f.SQSEvents = append(f.SQSEvents, q)
				f.MaximumConcurrency[q], _ = strconv.Atoi(scalar(get(get(ep, "ScalingConfig"), "MaximumConcurrency")))
				f.BatchSize[q], _ = strconv.Atoi(scalar(get(ep, "BatchSize")))
				reports := false
				for _, rt := range seq(get(ep, "FunctionResponseTypes")) {
					reports = reports || rt.Value == "ReportBatchItemFailures"
				}
				f.ReportsBatchItemFailures = f.ReportsBatchItemFailures && reports
			}
			t.Functions[id] = f
		case "AWS::ApiGatewayV2::Integration":
			if scalar(get(props, "IntegrationType")) == "MOCK" {
				mocks[id] = true
				continue
			}
			integrations[id] = refOf(get(props, "IntegrationUri"))
		case "AWS::ApiGatewayV2::Authorizer":
			authorizers[id] = refOf(get(props, "AuthorizerUri"))
		case "AWS::ApiGatewayV2::Route":
			r := rawRoute{key: scalar(get(props, "RouteKey")), authorizer: refOf(get(props, "AuthorizerId"))}
			if m := integration.FindStringSubmatch(scalar(get(props, "Target"))); m != nil {
				r.target = m[1]
			}
			routes = append(routes, r)
			routeIDs[id] = r.key
			t.routeIDs = append(t.routeIDs, id)
		case "AWS::ApiGatewayV2::RouteResponse":
			responses[refOf(get(props, "RouteId"))] = true
			t.routeResponses = append(t.routeResponses, id)
		case "AWS::ApiGatewayV2::Deployment":
			t.Deployments[id] = Deployment{LogicalID: id, DependsOn: dependsOn(res)}
		case "AWS::ApiGatewayV2::Stage":
			als := get(props, "AccessLogSettings")
			t.Stages[id] = Stage{LogicalID: id, AutoDeploy: scalar(get(props, "AutoDeploy")), Deployment: refOf(get(props, "DeploymentId")),
				AccessLogs: als != nil && als.Tag != "!If", DependsOn: dependsOn(res)}
		}
	}
	for _, r := range routes {
		fn, ok := integrations[r.target]
		if !ok && !mocks[r.target] {
			return nil, fmt.Errorf("route %s: target integration %q not found", r.key, r.target)
		}
		route := Route{Key: r.key, Function: fn, Mock: mocks[r.target]}
		if r.authorizer != "" {
			route.Authorizer = authorizers[r.authorizer]
		}
		t.Routes[r.key] = route
	}
	for id, key := range routeIDs {
		if responses[id] {
			r := t.Routes[key]
			r.Responds = true
			t.Routes[key] = r
		}
	}
	return t, nil
}

// QueueOrder returns queue logical ids with dead-letter queues first, so
// redrive targets exist before the queues that name them.
func (t *Template) QueueOrder() []string {
	ids := make([]string, 0, len(t.Queues))
	for id := range t.Queues {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		di, dj := t.Queues[ids[i]].DeadLetterQueue == "", t.Queues[ids[j]].DeadLetterQueue == ""
		if di != dj {
			return di
		}
		return ids[i] < ids[j]
	})
	return ids
}

func dependsOn(res *yaml.Node) []string {
	dep := get(res, "DependsOn")
	if dep == nil {
		return nil
	}
	if dep.Kind == yaml.ScalarNode {
		return []string{dep.Value}
	}
	var out []string
	for _, x := range seq(dep) {
		out = append(out, x.Value)
	}
	return out
}

// get returns the value of key in mapping node m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

func seq(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

// refOf returns the logical id a value refers to: !Ref X, !GetAtt X.Attr,
// or the first ${X} / ${X.Arn} of a !Sub that names a resource.
func refOf(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	switch n.Tag {
	case "!Ref":
		return n.Value
	case "!GetAtt":
		if n.Kind == yaml.ScalarNode {
			id, _, _ := cutDot(n.Value)
			return id
		}
		if s := seq(n); len(s) > 0 {
			return s[0].Value
		}
	case "!Sub":
		for _, m := range refSub.FindAllStringSubmatch(n.Value, -1) {
			if m[1] != "AWS" {
				return m[1]
			}
		}
	}
	return ""
}

func cutDot(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '.' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func envOf(vars *yaml.Node) map[string]string {
	env := map[string]string{}
	for i := 0; vars != nil && i+1 < len(vars.Content); i += 2 {
		env[vars.Content[i].Value] = refOf(vars.Content[i+1])
	}
	return env
}
