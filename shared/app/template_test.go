package app

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	signetcfg "github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/queue"
	"github.com/signet-im/signet/shared/template"
)

// anyResource resolves every resource and pseudo parameter to a name, and
// parameters to the given values: enough to run each function's init.
type anyResource map[string]string

func (r anyResource) Ref(id string) (string, error) {
	if v, ok := r[id]; ok {
		return v, nil
	}
	return "resource-" + id, nil
}

func (r anyResource) GetAtt(id, attr string) (string, error) { return id + "." + attr, nil }

// InboxRetentionDays=7, HistoryRetentionDays=14 was accepted by the
// template while only 3 functions got SIGNET_INBOX_RETENTION: the other 14
// failed their init (the authorizer too: nobody could connect). Every
// pair of allowed values must now either be refused by the template's Rules
// before anything is created, or start every function.
func TestEveryRetentionPairIsRefusedByTheRulesOrStartsEveryFunction(t *testing.T) {
	t.Parallel()
	tmpl := load(t)
	inbox, history := tmpl.Parameters["InboxRetentionDays"], tmpl.Parameters["HistoryRetentionDays"]
	if len(inbox.AllowedValues) == 0 || len(history.AllowedValues) == 0 {
		t.Fatal("retention parameters have no AllowedValues")
	}
	refused, started := 0, 0
	for _, in := range inbox.AllowedValues {
		for _, hi := range history.AllowedValues {
			params, err := tmpl.ParameterValues(map[string]string{"InboxRetentionDays": in, "HistoryRetentionDays": hi})
			if err != nil {
				t.Fatal(err)
			}
			ruleErr := tmpl.CheckRules(params)
			var inits []string
			for id := range tmpl.Functions {
				env, err := tmpl.Env(id, anyResource(params))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := signetcfg.ForFunction(func(k string) string { return env[k] }, id); err != nil {
					inits = append(inits, fmt.Sprintf("%s: %v", id, err))
				}
			}
			switch {
			case ruleErr != nil && len(inits) == 0:
				t.Errorf("inbox %s, history %s: refused by the Rules (%v) though every function starts", in, hi, ruleErr)
			case ruleErr == nil && len(inits) > 0:
				t.Errorf("inbox %s, history %s: accepted, but functions fail their init:\n%s", in, hi, strings.Join(inits, "\n"))
			case ruleErr != nil:
				refused++
			default:
				started++
			}
		}
	}
	if refused == 0 || started == 0 {
		t.Fatalf("%d pairs refused, %d started: the test covers nothing", refused, started)
	}
	// The pair from the report starts; a history shorter than the inbox is refused.
	for _, tc := range []struct {
		inbox, history string
		ok             bool
	}{{"7", "14", true}, {"30", "14", false}, {"30", "0", true}} {
		params, _ := tmpl.ParameterValues(map[string]string{"InboxRetentionDays": tc.inbox, "HistoryRetentionDays": tc.history})
		if err := tmpl.CheckRules(params); (err == nil) != tc.ok {
			t.Errorf("inbox %s, history %s: rules say %v", tc.inbox, tc.history, err)
		}
	}
}

// Lambda functions in a new account share 10 concurrent executions: the
// queue consumers (three pollers at AWS's minimum of 2 each: redelivery,
// fan-out, presence) must leave room for the WebSocket routes.
func TestQueueConsumersLeaveConcurrencyForTheRoutes(t *testing.T) {
	t.Parallel()
	tmpl := load(t)
	total := 0
	for id, f := range tmpl.Functions {
		for _, q := range f.SQSEvents {
			mc := f.MaximumConcurrency[q]
			if mc < 2 {
				t.Errorf("function %s: SQS event %s has no ScalingConfig.MaximumConcurrency (AWS's minimum is 2)", id, q)
			}
			total += mc
			if vt, timeout := tmpl.Queues[q].VisibilityTimeout, f.Timeout; vt < 6*timeout {
				t.Errorf("queue %s: visibility timeout %d s is under 6 × %s's timeout (%d s), as AWS recommends", q, vt, id, timeout)
			}
		}
	}
	if total > 6 {
		t.Errorf("queue consumers may take %d of a new account's 10 executions", total)
	}
}

// The consumers retry a failed message after queue.RetryWait (2 s
// doubling to a minute) instead of the visibility timeout, so a redrive
// policy's maxReceiveCount alone says how long a failed message is tried
// before it is dead-lettered: at least as long as before the consumers
// set their own waits (then 4, 7 and 2 retries each a visibility timeout
// later), as the template's comments and the README say.
func TestAFailedQueueMessageIsTriedAsLongAsBeforeItIsDeadLettered(t *testing.T) {
	t.Parallel()
	tmpl := load(t)
	for q, want := range map[string]time.Duration{"RedeliveryQueue": 4 * time.Minute, "FanoutQueue": 21 * time.Minute, "PresenceQueue": 6 * time.Minute} {
		var window time.Duration
		for receives := 1; receives < tmpl.Queues[q].MaxReceiveCount; receives++ {
			window += queue.RetryWait(receives)
		}
		if window < want {
			t.Errorf("queue %s: a failed message is dead-lettered after %v of retries (maxReceiveCount %d), want at least %v", q, window, tmpl.Queues[q].MaxReceiveCount, want)
		}
	}
}

func TestOutputsAndEndpointsUseTheURLSuffix(t *testing.T) {
	t.Parallel()
	if strings.Contains(string(templateBytes(t)), "execute-api.${AWS::Region}.amazonaws.com") {
		t.Fatal("template hard-codes amazonaws.com in an execute-api URL; use ${AWS::URLSuffix}")
	}
}

var _ template.Resolver = anyResource(nil)

// resources returns the template's resources as YAML nodes by logical id.
func resources(t *testing.T) map[string]*yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(templateBytes(t), &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]*yaml.Node{}
	res := field(doc.Content[0], "Resources")
	for i := 0; i+1 < len(res.Content); i += 2 {
		out[res.Content[i].Value] = res.Content[i+1]
	}
	return out
}

func field(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// Function logs once went to log groups Lambda creates on first use, which
// never expire; and the alarms notified no one.
func TestFunctionLogsExpireAndAlarmsCanNotify(t *testing.T) {
	t.Parallel()
	res := resources(t)
	for id, r := range res {
		switch field(r, "Type").Value {
		case "AWS::Serverless::Function":
			group := field(field(field(r, "Properties"), "LoggingConfig"), "LogGroup")
			if group == nil || group.Tag != "!Ref" {
				t.Errorf("function %s: LoggingConfig.LogGroup must reference a log group of the template", id)
				continue
			}
			lg := res[group.Value]
			if lg == nil || field(lg, "Type").Value != "AWS::Logs::LogGroup" || field(field(lg, "Properties"), "RetentionInDays") == nil {
				t.Errorf("function %s: log group %s has no RetentionInDays", id, group.Value)
			}
		case "AWS::CloudWatch::Alarm":
			props := field(r, "Properties")
			if field(props, "AlarmActions") == nil || field(props, "OKActions") == nil {
				t.Errorf("alarm %s: no AlarmActions/OKActions (the AlarmTopicArn parameter)", id)
			}
		}
	}
}

// Issue 13: a default is written once. A deployed stack's settings come
// from the template (its parameters' defaults and Globals), a local one's
// from the code (config.Vars): with the template's defaults every
// function must load exactly the configuration the code's defaults give,
// so neither side can drift from the other unnoticed.
func TestTheTemplatesDefaultsAreTheCodesDefaults(t *testing.T) {
	t.Parallel()
	tmpl := load(t)
	params, err := tmpl.ParameterValues(nil)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]bool{}
	for _, v := range signetcfg.Vars {
		if v.Default != "" {
			settings[v.Name] = true
		}
	}
	compared := 0
	for id := range tmpl.Functions {
		env, err := tmpl.Env(id, anyResource(params))
		if err != nil {
			t.Fatal(err)
		}
		fromTemplate, err := signetcfg.ForFunction(func(k string) string { return env[k] }, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		fromCode, err := signetcfg.ForFunction(func(k string) string {
			if settings[k] {
				return "" // the code's default
			}
			return env[k]
		}, id)
		if err != nil {
			t.Fatalf("%s with the code's defaults: %v", id, err)
		}
		for k := range env {
			if settings[k] {
				compared++
			}
		}
		if !reflect.DeepEqual(fromTemplate, fromCode) {
			t.Errorf("%s: the template's defaults give\n%+v\nthe code's\n%+v", id, fromTemplate, fromCode)
		}
	}
	if compared < 20 {
		t.Fatalf("only %d settings compared: the test covers nothing", compared)
	}
}
