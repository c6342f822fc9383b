// Package memsns is an in-memory Amazon SNS for the local stack: the part
// of SNS mobile push Signet uses (issue 16's offline hand-off), over SNS's
// own Query protocol (form-encoded requests, XML answers) so that the real
// SDK client talks to it. goaws emulates SNS topics but neither platform
// applications nor endpoints; LocalStack has both and records what it
// would have sent to APNs/FCM at /_aws/sns/platform-endpoint-messages —
// memsns does the same, in the same shape, so one test reads either.
//
// Actions: CreatePlatformApplication, DeletePlatformApplication,
// CreatePlatformEndpoint (idempotent per token and attributes, as in AWS),
// GetEndpointAttributes, SetEndpointAttributes, DeleteEndpoint and Publish
// to an endpoint (TargetArn; MessageStructure json needs a "default").
package memsns

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Account is the account id in ARNs.
const Account = "000000000000"

// MessagesPath is where the messages published to endpoints are listed
// (LocalStack's path and JSON shape).
const MessagesPath = "/_aws/sns/platform-endpoint-messages"

// maxMessage is SNS's largest message, 256 KiB.
const maxMessage = 256 << 10

// Message is one message published to an endpoint: what APNs or FCM would
// have been sent — with MessageStructure json, the entry for the
// endpoint's platform (APNS, APNS_SANDBOX, GCM), else "default", as SNS
// delivers it. (The listing encodes that content once more as a JSON
// string, as LocalStack's does.)
type Message struct {
	TargetArn        string `json:"TargetArn"`
	Message          string `json:"Message"`
	MessageStructure string `json:"MessageStructure,omitempty"`
	MessageID        string `json:"MessageId"`
}

type application struct {
	arn, name, platform string
	attrs               map[string]string
}

type endpoint struct {
	arn, app string
	attrs    map[string]string // Token, Enabled, CustomUserData
}

// Server is the SNS Query API of one region.
type Server struct {
	region    string
	mu        sync.Mutex
	apps      map[string]*application
	endpoints map[string]*endpoint
	messages  map[string][]Message
	onPublish func(Message)
}

// New returns an empty SNS of region (us-east-1 when empty).
func New(region string) *Server {
	if region == "" {
		region = "us-east-1"
	}
	return &Server{region: region, apps: map[string]*application{}, endpoints: map[string]*endpoint{}, messages: map[string][]Message{}}
}

// OnPublish calls f with each message published (signet local prints
// what would have been sent); set it before serving.
func (s *Server) OnPublish(f func(Message)) { s.onPublish = f }

// Messages returns the messages published to each endpoint so far.
func (s *Server) Messages() map[string][]Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]Message, len(s.messages))
	for k, v := range s.messages {
		out[k] = append([]Message(nil), v...)
	}
	return out
}

// apiError is an SNS error answer.
type apiError struct {
	status     int
	code, msg  string
	senderSide bool
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func invalid(format string, a ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: "InvalidParameter", msg: fmt.Sprintf(format, a...), senderSide: true}
}

func notFound(format string, a ...any) *apiError {
	return &apiError{status: http.StatusNotFound, code: "NotFound", msg: fmt.Sprintf(format, a...), senderSide: true}
}

const xmlns = "http://sns.amazonaws.com/doc/2010-03-31/"

// ServeHTTP answers one Query API request, or the messages listing.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == MessagesPath {
		s.serveMessages(w, r)
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, &apiError{status: http.StatusMethodNotAllowed, code: "InvalidAction", msg: "POST a form", senderSide: true})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 2*maxMessage)
	if err := r.ParseForm(); err != nil {
		writeError(w, invalid("unreadable form: %v", err))
		return
	}
	action := r.PostForm.Get("Action")
	result, err := s.do(action, r.PostForm)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<%sResponse xmlns="%s"><%sResult>%s</%sResult><ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>`,
		action, xmlns, action, result, action, newID(), action)
}

// do runs one action and returns its Result element's inner XML.
func (s *Server) do(action string, f url.Values) (string, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch action {
	case "CreatePlatformApplication":
		name, platform := f.Get("Name"), f.Get("Platform")
		if name == "" || platform == "" {
			return "", invalid("Name and Platform are required")
		}
		switch platform {
		case "APNS", "APNS_SANDBOX", "GCM", "ADM", "BAIDU", "MPNS", "WNS":
		default:
			return "", invalid("Invalid parameter: Platform Reason: %s is not supported", platform)
		}
		arn := fmt.Sprintf("arn:aws:sns:%s:%s:app/%s/%s", s.region, Account, platform, name)
		s.apps[arn] = &application{arn: arn, name: name, platform: platform, attrs: attributes(f)}
		return elem("PlatformApplicationArn", arn), nil
	case "DeletePlatformApplication":
		arn := f.Get("PlatformApplicationArn")
		delete(s.apps, arn)
		for k, e := range s.endpoints {
			if e.app == arn {
				delete(s.endpoints, k)
			}
		}
		return "", nil
	case "CreatePlatformEndpoint":
		app := s.apps[f.Get("PlatformApplicationArn")]
		if app == nil {
			return "", notFound("PlatformApplication does not exist")
		}
		token := f.Get("Token")
		if token == "" {
			return "", invalid("Invalid parameter: Token Reason: cannot be empty")
		}
		attrs := attributes(f)
		attrs["Token"] = token
		if v := f.Get("CustomUserData"); v != "" {
			attrs["CustomUserData"] = v
		}
		if _, ok := attrs["Enabled"]; !ok {
			attrs["Enabled"] = "true"
		}
		for _, e := range s.endpoints {
			if e.app == app.arn && e.attrs["Token"] == token {
				// AWS: the same token with the same attributes is the same
				// endpoint; with others, an error.
				if e.attrs["CustomUserData"] != attrs["CustomUserData"] {
					return "", invalid("Invalid parameter: Token Reason: Endpoint %s already exists with the same Token, but different attributes.", e.arn)
				}
				return elem("EndpointArn", e.arn), nil
			}
		}
		arn := fmt.Sprintf("arn:aws:sns:%s:%s:endpoint/%s/%s/%s", s.region, Account, app.platform, app.name, newID())
		s.endpoints[arn] = &endpoint{arn: arn, app: app.arn, attrs: attrs}
		return elem("EndpointArn", arn), nil
	case "GetEndpointAttributes":
		e := s.endpoints[f.Get("EndpointArn")]
		if e == nil {
			return "", notFound("Endpoint does not exist")
		}
		keys := make([]string, 0, len(e.attrs))
		for k := range e.attrs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		b.WriteString("<Attributes>")
		for _, k := range keys {
			b.WriteString("<entry>" + elem("key", k) + elem("value", e.attrs[k]) + "</entry>")
		}
		b.WriteString("</Attributes>")
		return b.String(), nil
	case "SetEndpointAttributes":
		e := s.endpoints[f.Get("EndpointArn")]
		if e == nil {
			return "", notFound("Endpoint does not exist")
		}
		for k, v := range attributes(f) {
			e.attrs[k] = v
		}
		return "", nil
	case "DeleteEndpoint":
		delete(s.endpoints, f.Get("EndpointArn"))
		return "", nil
	case "Publish":
		return s.publish(f)
	}
	return "", &apiError{status: http.StatusBadRequest, code: "InvalidAction", msg: fmt.Sprintf("the action %q is not valid for this endpoint (memsns serves mobile push only)", action), senderSide: true}
}

// publish sends a message to one endpoint (the caller holds mu).
func (s *Server) publish(f url.Values) (string, *apiError) {
	target := f.Get("TargetArn")
	if target == "" {
		return "", invalid("Invalid parameter: memsns publishes to endpoints only (TargetArn)")
	}
	e := s.endpoints[target]
	if e == nil {
		return "", invalid("Invalid parameter: TargetArn Reason: No endpoint found for the target arn specified")
	}
	if e.attrs["Enabled"] != "true" {
		return "", &apiError{status: http.StatusBadRequest, code: "EndpointDisabled", msg: "Endpoint is disabled", senderSide: true}
	}
	msg := f.Get("Message")
	if msg == "" {
		return "", invalid("Invalid parameter: Empty message")
	}
	if len(msg) > maxMessage {
		return "", invalid("Invalid parameter: Message too long")
	}
	structure := f.Get("MessageStructure")
	content := msg
	if structure != "" {
		if structure != "json" {
			return "", invalid("Invalid parameter: MessageStructure")
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(msg), &m); err != nil {
			return "", invalid("Invalid parameter: Message Structure - JSON message body failed to parse")
		}
		def, ok := m["default"].(string)
		if !ok {
			return "", invalid("Invalid parameter: Message Structure - No default entry in JSON message body")
		}
		content = def
		if v, ok := m[s.apps[e.app].platform].(string); ok {
			content = v
		}
	}
	m := Message{TargetArn: target, Message: content, MessageStructure: structure, MessageID: newUUID()}
	s.messages[target] = append(s.messages[target], m)
	if s.onPublish != nil {
		s.onPublish(m)
	}
	return elem("MessageId", m.MessageID), nil
}

// serveMessages lists published messages (LocalStack's shape), of one
// endpoint with ?endpointArn=; DELETE clears them.
func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request) {
	arn := r.URL.Query().Get("endpointArn")
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method == http.MethodDelete {
		if arn != "" {
			delete(s.messages, arn)
		} else {
			s.messages = map[string][]Message{}
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	out := map[string][]Message{}
	for k, v := range s.messages {
		if arn == "" || k == arn {
			for _, m := range v {
				if m.MessageStructure == "json" {
					b, _ := json.Marshal(m.Message)
					m.Message = string(b)
				}
				out[k] = append(out[k], m)
			}
		}
	}
	if arn != "" && out[arn] == nil {
		out[arn] = []Message{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"platform_endpoint_messages": out, "region": s.region})
}

// attributes reads Attributes.entry.N.key / .value pairs.
func attributes(f url.Values) map[string]string {
	out := map[string]string{}
	for i := 1; ; i++ {
		k := f.Get("Attributes.entry." + strconv.Itoa(i) + ".key")
		if k == "" {
			return out
		}
		out[k] = f.Get("Attributes.entry." + strconv.Itoa(i) + ".value")
	}
}

func writeError(w http.ResponseWriter, e *apiError) {
	typ := "Receiver"
	if e.senderSide {
		typ = "Sender"
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(e.status)
	fmt.Fprintf(w, `<ErrorResponse xmlns="%s"><Error><Type>%s</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>%s</RequestId></ErrorResponse>`,
		xmlns, typ, e.code, escape(e.msg), newID())
}

// elem renders <name>value</name> with value escaped.
func elem(name, value string) string { return "<" + name + ">" + escape(value) + "</" + name + ">" }

func escape(v string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(v))
	return b.String()
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newUUID() string {
	h := newID()
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
