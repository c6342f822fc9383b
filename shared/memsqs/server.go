package memsqs

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/signet-im/signet/shared/journal"
)

// Account is the account id in queue URLs and ARNs.
const Account = "000000000000"

// maxBody is the largest request body read: a batch of ten messages of
// 256 KiB each must get its own BatchRequestTooLong answer, not a cut body.
const maxBody = 4 << 20

// Server is the SQS JSON API (X-Amz-Target AmazonSQS.*).
type Server struct {
	mu     sync.RWMutex
	queues map[string]*queue // by name
	// now is the clock (time.Now; tests may set it before serving).
	now func() time.Time
	// journal, when set (Open), receives every change.
	journal *journal.Journal
}

// New returns a server with no queues.
func New() *Server { return &Server{queues: map[string]*queue{}, now: time.Now} }

// Start serves a new server on a free 127.0.0.1 port and returns its
// endpoint and a stop function.
func Start() (endpoint string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: New(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// apiError is an error answer: the modeled shape name (its __type), the
// query-compatible code and fault the SDK also reads, and the message.
type apiError struct {
	shape, code, msg string
	server           bool
}

func (e *apiError) Error() string { return e.shape + ": " + e.msg }

func errorf(shape, code, format string, a ...any) *apiError {
	return &apiError{shape: shape, code: code, msg: fmt.Sprintf(format, a...)}
}

func invalidParameter(format string, a ...any) *apiError {
	return errorf("InvalidParameterValue", "InvalidParameterValue", format, a...)
}

func noQueue() *apiError {
	return errorf("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
}

func unsupported(what string) *apiError {
	return errorf("UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", "memsqs does not implement %s", what)
}

// ServeHTTP dispatches one API call.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	op, ok := strings.CutPrefix(target, "AmazonSQS.")
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var out any
	switch {
	case err != nil:
		return
	case !ok:
		err = errorf("UnknownOperationException", "InvalidAction", "memsqs speaks the JSON protocol only (X-Amz-Target AmazonSQS.<Action>), got %q", target)
	default:
		c := &call{s: s, ctx: r.Context(), host: r.Host, region: regionOf(r.Header.Get("Authorization")), now: s.now()}
		out, err = c.dispatch(op, body)
		if err == nil {
			err = s.journalError()
		}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", requestID())
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{shape: "InternalError", code: "InternalError", msg: err.Error(), server: true}
		}
		fault, status := "Sender", http.StatusBadRequest
		if ae.server {
			fault, status = "Receiver", http.StatusInternalServerError
		}
		w.Header().Set("X-Amzn-Query-Error", ae.code+";"+fault)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + ae.shape, "message": ae.msg})
		return
	}
	_ = json.NewEncoder(w).Encode(out)
}

// call is one request being served.
type call struct {
	s            *Server
	ctx          context.Context
	host, region string
	now          time.Time
}

func (c *call) dispatch(op string, body []byte) (any, error) {
	handlers := map[string]func([]byte) (any, error){
		"CreateQueue": c.createQueue, "GetQueueUrl": c.getQueueURL, "ListQueues": c.listQueues, "DeleteQueue": c.deleteQueue,
		"GetQueueAttributes": c.getQueueAttributes, "SetQueueAttributes": c.setQueueAttributes, "PurgeQueue": c.purgeQueue,
		"SendMessage": c.sendMessage, "SendMessageBatch": c.sendMessageBatch, "ReceiveMessage": c.receiveMessage,
		"DeleteMessage": c.deleteMessage, "DeleteMessageBatch": c.deleteMessageBatch,
		"ChangeMessageVisibility": c.changeVisibility, "ChangeMessageVisibilityBatch": c.changeVisibilityBatch,
	}
	h, ok := handlers[op]
	if !ok {
		return nil, unsupported(op)
	}
	return h(body)
}

func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return errorf("InvalidParameterValue", "InvalidParameterValue", "request body: %v", err)
	}
	return nil
}

// queueRef is the QueueUrl every per-queue request carries.
type queueRef struct{ QueueUrl string }

func (r queueRef) url() string { return r.QueueUrl }

// decodeQueue decodes a per-queue request into in and finds its queue.
func (c *call) decodeQueue(body []byte, in interface{ url() string }) (*queue, error) {
	if err := decode(body, in); err != nil {
		return nil, err
	}
	return c.queue(in.url())
}

// queue finds the queue a QueueUrl names (by its last path segment, as
// SQS's JSON endpoint does).
func (c *call) queue(url string) (*queue, error) {
	if url == "" {
		return nil, errorf("MissingParameter", "MissingParameter", "The request must contain the parameter QueueUrl.")
	}
	name := url[strings.LastIndexByte(url, '/')+1:]
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	q, ok := c.s.queues[name]
	if !ok {
		return nil, noQueue()
	}
	return q, nil
}

func (c *call) queueByARN(arn string) *queue {
	c.s.mu.RLock()
	defer c.s.mu.RUnlock()
	for _, q := range c.s.queues {
		if q.arn == arn {
			return q
		}
	}
	return nil
}

// regionOf reads the region from a SigV4 Authorization header
// (Credential=AKID/date/region/sqs/aws4_request); us-east-1 without one.
func regionOf(auth string) string {
	_, cred, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return "us-east-1"
	}
	parts := strings.Split(cred, "/")
	if len(parts) < 3 || parts[2] == "" {
		return "us-east-1"
	}
	return parts[2]
}

func messageID() string {
	var b [16]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func requestID() string { return messageID() }

func itoa(n int) string { return strconv.Itoa(n) }
