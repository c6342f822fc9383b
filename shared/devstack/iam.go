package devstack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/signet-im/signet/shared/iam"
)

// enforcer is the HTTP transport of one function's SDK clients: it reads
// each AWS request as the service would (DynamoDB and SQS JSON protocol
// targets and bodies, @connections paths), asks the function's policy for
// every action and resource the request needs, and answers a denied one
// with the AccessDeniedException AWS would send, never reaching the
// emulator.
type enforcer struct {
	function  string
	principal string // the role session ARN in error messages
	policy    iam.Policy
	arn       arns
	next      http.RoundTripper
	denied    func(function string, r iam.Request)
}

// arns builds the ARNs of the stack's resources.
type arns struct {
	partition, region, account, apiID string
}

func (a arns) table(name string) string {
	return fmt.Sprintf("arn:%s:dynamodb:%s:%s:table/%s", a.partition, a.region, a.account, name)
}

func (a arns) queue(name string) string {
	return fmt.Sprintf("arn:%s:sqs:%s:%s:%s", a.partition, a.region, a.account, name)
}

func (a arns) connection(stage, method, id string) string {
	return fmt.Sprintf("arn:%s:execute-api:%s:%s:%s/%s/%s/@connections/%s", a.partition, a.region, a.account, a.apiID, stage, method, id)
}

func (e *enforcer) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	needs, service, err := e.requests(req, body)
	if err != nil {
		return e.deny(req, service, iam.Request{Action: "unknown", Resource: req.URL.String()}, err.Error()), nil
	}
	for _, r := range needs {
		if !e.policy.Allows(r) {
			if e.denied != nil {
				e.denied(e.function, r)
			}
			return e.deny(req, service, r, ""), nil
		}
	}
	return e.next.RoundTrip(req)
}

// requests lists what req needs permission for.
func (e *enforcer) requests(req *http.Request, body []byte) ([]iam.Request, string, error) {
	target := req.Header.Get("X-Amz-Target")
	switch {
	case strings.HasPrefix(target, "DynamoDB_20120810."):
		rs, err := e.dynamoRequests(strings.TrimPrefix(target, "DynamoDB_20120810."), body)
		return rs, "dynamodb", err
	case strings.HasPrefix(target, "AmazonSQS."):
		rs, err := e.sqsRequests(strings.TrimPrefix(target, "AmazonSQS."), body)
		return rs, "sqs", err
	}
	if form, err := url.ParseQuery(string(body)); err == nil && form.Get("Version") == "2010-03-31" && form.Get("Action") != "" {
		rs, err := snsRequests(form)
		return rs, "sns", err
	}
	if stage, id, ok := connectionPath(req.URL.Path); ok {
		return []iam.Request{{Action: "execute-api:ManageConnections", Resource: e.arn.connection(stage, req.Method, id)}}, "execute-api", nil
	}
	return nil, "", fmt.Errorf("request to %s is not an AWS call the local stack knows", req.URL)
}

// connectionPath splits /{stage}/@connections/{id}.
func connectionPath(p string) (stage, id string, ok bool) {
	before, after, found := strings.Cut(strings.TrimPrefix(p, "/"), "/@connections/")
	if !found || before == "" || after == "" {
		return "", "", false
	}
	stage = before[strings.LastIndex(before, "/")+1:]
	if u, err := url.PathUnescape(after); err == nil {
		after = u
	}
	return stage, after, true
}

// transactActions maps the kinds of a transaction item to the action IAM
// authorizes each item with (transactions have no action of their own).
var transactActions = map[string]string{"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}

func (e *enforcer) dynamoRequests(op string, body []byte) ([]iam.Request, error) {
	var in struct {
		TableName     string
		IndexName     string
		RequestItems  map[string]json.RawMessage
		TransactItems []map[string]struct{ TableName string }
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("dynamodb %s: unreadable body: %w", op, err)
	}
	var out []iam.Request
	add := func(action, table string) {
		out = append(out, iam.Request{Action: "dynamodb:" + action, Resource: e.arn.table(table)})
	}
	switch op {
	case "BatchGetItem", "BatchWriteItem":
		for table := range in.RequestItems {
			add(op, table)
		}
	case "TransactWriteItems", "TransactGetItems":
		for _, item := range in.TransactItems {
			for kind, v := range item {
				action, ok := transactActions[kind]
				if !ok {
					return nil, fmt.Errorf("dynamodb %s: unknown item kind %q", op, kind)
				}
				add(action, v.TableName)
			}
		}
	default:
		if in.TableName == "" {
			return nil, fmt.Errorf("dynamodb %s: no TableName", op)
		}
		table := in.TableName
		if in.IndexName != "" {
			table += "/index/" + in.IndexName
		}
		add(op, table)
	}
	return out, nil
}

// sqsActions maps batch operations to the action IAM authorizes them with.
var sqsActions = map[string]string{"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage", "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}

func (e *enforcer) sqsRequests(op string, body []byte) ([]iam.Request, error) {
	var in struct{ QueueUrl string }
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("sqs %s: unreadable body: %w", op, err)
	}
	if in.QueueUrl == "" {
		return nil, fmt.Errorf("sqs %s: no QueueUrl", op)
	}
	action := op
	if a, ok := sqsActions[op]; ok {
		action = a
	}
	name := in.QueueUrl[strings.LastIndex(in.QueueUrl, "/")+1:]
	return []iam.Request{{Action: "sqs:" + action, Resource: e.arn.queue(name)}}, nil
}

// snsRequests lists what an SNS Query API request needs: its action on
// the resource it names (platform application, endpoint).
func snsRequests(form url.Values) ([]iam.Request, error) {
	action := form.Get("Action")
	var arn string
	switch action {
	case "CreatePlatformEndpoint":
		arn = form.Get("PlatformApplicationArn")
	case "Publish":
		arn = form.Get("TargetArn") + form.Get("TopicArn")
	case "GetEndpointAttributes", "SetEndpointAttributes", "DeleteEndpoint":
		arn = form.Get("EndpointArn")
	default:
		return nil, fmt.Errorf("sns %s: an action the local stack does not authorize", action)
	}
	if arn == "" {
		return nil, fmt.Errorf("sns %s: no resource ARN", action)
	}
	return []iam.Request{{Action: "sns:" + action, Resource: arn}}, nil
}

// deny answers as the service does when IAM refuses a request.
func (e *enforcer) deny(req *http.Request, service string, r iam.Request, why string) *http.Response {
	msg := (&iam.DeniedError{Principal: e.principal, Request: r}).Error()
	if why != "" {
		msg = why
	}
	h := http.Header{}
	h.Set("X-Amzn-Requestid", newRequestID())
	status := http.StatusBadRequest
	var b []byte
	switch service {
	case "dynamodb":
		h.Set("Content-Type", "application/x-amz-json-1.0")
		b, _ = json.Marshal(map[string]string{"__type": "com.amazon.coral.service#AccessDeniedException", "Message": msg})
	case "sqs":
		h.Set("Content-Type", "application/x-amz-json-1.0")
		h.Set("X-Amzn-Query-Error", "AccessDenied;Sender")
		b, _ = json.Marshal(map[string]string{"__type": "com.amazon.coral.service#AccessDeniedException", "message": msg})
	case "sns":
		status = http.StatusForbidden
		h.Set("Content-Type", "text/xml")
		b = []byte(`<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><Error><Type>Sender</Type><Code>AuthorizationError</Code><Message>` +
			html.EscapeString(msg) + `</Message></Error><RequestId>` + newRequestID() + `</RequestId></ErrorResponse>`)
	default:
		status = http.StatusForbidden
		h.Set("Content-Type", "application/json")
		h.Set("X-Amzn-Errortype", "AccessDeniedException")
		b, _ = json.Marshal(map[string]string{"Message": msg})
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: req,
	}
}

var requestIDs struct {
	sync.Mutex
	n int
}

func newRequestID() string {
	requestIDs.Lock()
	defer requestIDs.Unlock()
	requestIDs.n++
	return fmt.Sprintf("local-iam-%08d", requestIDs.n)
}
