package devstack

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/signet-im/signet/shared/provision"
)

// accountID is the local stack's AWS account.
const accountID = "000000000000"

// resolver answers the template's intrinsic functions for the local stack:
// parameters, pseudo parameters, and the tables, queues and APIs it
// provisioned. What it does not provision is an error, never a guess.
type resolver struct {
	params map[string]string
	tables map[string]string // logical id → name
	queues map[string]string // logical id → URL
	prefix string
	region string
	apiID  string
}

func (r *resolver) Ref(id string) (string, error) {
	switch id {
	case "AWS::Region":
		return r.region, nil
	case "AWS::AccountId":
		return accountID, nil
	case "AWS::Partition":
		return "aws", nil
	case "AWS::URLSuffix":
		return "amazonaws.com", nil
	case "AWS::StackName":
		return r.prefix, nil
	case "WebSocketApi", "HttpApi":
		return r.apiID, nil
	}
	if v, ok := r.params[id]; ok {
		return v, nil
	}
	if v, ok := r.tables[id]; ok {
		return v, nil
	}
	if v, ok := r.queues[id]; ok {
		return v, nil
	}
	return "", fmt.Errorf("!Ref %s: not a parameter or a resource the local stack provisions", id)
}

func (r *resolver) GetAtt(id, attr string) (string, error) {
	if _, ok := r.queues[id]; ok {
		name := provision.Name(r.prefix, id)
		switch attr {
		case "QueueName":
			return name, nil
		case "Arn":
			return fmt.Sprintf("arn:aws:sqs:%s:%s:%s", r.region, accountID, name), nil
		}
	}
	if name, ok := r.tables[id]; ok && attr == "Arn" {
		return fmt.Sprintf("arn:aws:dynamodb:%s:%s:table/%s", r.region, accountID, name), nil
	}
	return "", fmt.Errorf("!GetAtt %s.%s: not an attribute the local stack provides", id, attr)
}

var ssmRef = regexp.MustCompile(`\{\{resolve:ssm:([^}:]+)(?::\d+)?\}\}`)

// resolveSSM replaces CloudFormation's SSM dynamic references with the
// local parameter store's values; an unknown parameter resolves to "" (on
// AWS the deployment would fail; locally the function's init then says
// which variable is missing).
func resolveSSM(v string, store map[string]string) string {
	if !strings.Contains(v, "{{resolve:") {
		return v
	}
	return ssmRef.ReplaceAllStringFunc(v, func(m string) string {
		return store[ssmRef.FindStringSubmatch(m)[1]]
	})
}
