package template

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/signet-im/signet/shared/iam"
)

// samPolicy is one SAM policy template: the actions it grants and the
// resource ARNs it grants them on (%[1]s is the partition, %[2]s the
// region, %[3]s the account, %[4]s the template's one parameter). These are
// the definitions of AWS SAM's policy_templates.json for the templates
// Signet's template may use; any other name is refused, so the local stack
// never grants more than AWS would.
type samPolicy struct {
	param     string
	actions   []string
	resources []string
}

var samPolicies = map[string]samPolicy{
	"DynamoDBCrudPolicy": {"TableName", []string{"dynamodb:GetItem", "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:Scan",
		"dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem", "dynamodb:BatchGetItem", "dynamodb:DescribeTable",
		"dynamodb:ConditionCheckItem"}, dynamoTableResources},
	"DynamoDBReadPolicy": {"TableName", []string{"dynamodb:GetItem", "dynamodb:Scan", "dynamodb:Query", "dynamodb:BatchGetItem",
		"dynamodb:DescribeTable"}, dynamoTableResources},
	"DynamoDBWritePolicy": {"TableName", []string{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem"},
		dynamoTableResources},
	"SQSSendMessagePolicy": {"QueueName", []string{"sqs:SendMessage*"}, []string{"arn:%[1]s:sqs:%[2]s:%[3]s:%[4]s"}},
	"SQSPollerPolicy": {"QueueName", []string{"sqs:ChangeMessageVisibility", "sqs:ChangeMessageVisibilityBatch", "sqs:DeleteMessage",
		"sqs:DeleteMessageBatch", "sqs:GetQueueAttributes", "sqs:ReceiveMessage"}, []string{"arn:%[1]s:sqs:%[2]s:%[3]s:%[4]s"}},
}

// sqsQueueExecutionRole is the SQS part of the AWS managed policy
// AWSLambdaSQSQueueExecutionRole, which SAM attaches for an SQS event
// (samtranslator's SQS event source, get_policy_arn).
var sqsQueueExecutionRole = []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}

var dynamoTableResources = []string{"arn:%[1]s:dynamodb:%[2]s:%[3]s:table/%[4]s", "arn:%[1]s:dynamodb:%[2]s:%[3]s:table/%[4]s/index/*"}

// Policy returns the identity-based policy of function id's execution
// role: each entry of its Policies (SAM policy templates and inline
// statements), resolved through r. Managed policy names are refused: the
// template grants what the code needs, table by table.
func (t *Template) Policy(id string, r Resolver) (iam.Policy, error) {
	f, ok := t.Functions[id]
	if !ok {
		return iam.Policy{}, fmt.Errorf("no function %s in the template", id)
	}
	var p iam.Policy
	pseudo := make([]any, 3)
	for i, name := range []string{"AWS::Partition", "AWS::Region", "AWS::AccountId"} {
		v, err := r.Ref(name)
		if err != nil {
			return iam.Policy{}, err
		}
		pseudo[i] = v
	}
	for _, entry := range seq(f.policies) {
		if entry.Kind != yaml.MappingNode || len(entry.Content) != 2 {
			return iam.Policy{}, fmt.Errorf("function %s: line %d: policy %q is not supported (use SAM policy templates or Statement)", id, entry.Line, entry.Value)
		}
		name, body := entry.Content[0].Value, entry.Content[1]
		if name == "Statement" {
			for _, s := range seq(body) {
				st, err := statement(s, r)
				if err != nil {
					return iam.Policy{}, fmt.Errorf("function %s: line %d: %w", id, s.Line, err)
				}
				p.Statements = append(p.Statements, st)
			}
			continue
		}
		sp, ok := samPolicies[name]
		if !ok {
			return iam.Policy{}, fmt.Errorf("function %s: line %d: SAM policy template %s is not supported by the local stack", id, entry.Line, name)
		}
		v, err := Resolve(get(body, sp.param), r)
		if err != nil || v == "" {
			return iam.Policy{}, fmt.Errorf("function %s: %s.%s: %v", id, name, sp.param, err)
		}
		st := iam.Statement{Effect: iam.Allow, Actions: sp.actions}
		for _, res := range sp.resources {
			st.Resource = append(st.Resource, fmt.Sprintf(res, append(pseudo, v)...))
		}
		p.Statements = append(p.Statements, st)
	}
	// SAM gives a function with an SQS event the managed policy
	// AWSLambdaSQSQueueExecutionRole: receive, delete and the queue's
	// attributes, what the event source mapping needs — and not
	// sqs:ChangeMessageVisibility, which a function that sets its own
	// retry waits must be granted in its Policies. (The managed policy's
	// resource is "*"; the local stack grants the event's queue only, so
	// that a call it allows is one AWS allows.)
	for _, q := range f.SQSEvents {
		name, err := r.GetAtt(q, "QueueName")
		if err != nil {
			return iam.Policy{}, fmt.Errorf("function %s: SQS event %s: %w", id, q, err)
		}
		p.Statements = append(p.Statements, iam.Statement{Effect: iam.Allow, Actions: sqsQueueExecutionRole,
			Resource: []string{fmt.Sprintf("arn:%[1]s:sqs:%[2]s:%[3]s:%[4]s", append(pseudo, name)...)}})
	}
	return p, nil
}

func statement(n *yaml.Node, r Resolver) (iam.Statement, error) {
	st := iam.Statement{Effect: iam.Effect(scalar(get(n, "Effect")))}
	if st.Effect != iam.Allow && st.Effect != iam.Deny {
		return st, fmt.Errorf("statement Effect %q", st.Effect)
	}
	list := func(key string) ([]string, error) {
		v := get(n, key)
		if v == nil {
			return nil, fmt.Errorf("statement has no %s", key)
		}
		items := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode && v.Tag == "!!seq" {
			items = v.Content
		}
		var out []string
		for _, it := range items {
			s, err := Resolve(it, r)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			out = append(out, s)
		}
		return out, nil
	}
	var err error
	if st.Actions, err = list("Action"); err != nil {
		return st, err
	}
	if st.Resource, err = list("Resource"); err != nil {
		return st, err
	}
	return st, nil
}
