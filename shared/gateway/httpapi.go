package gateway

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// HTTPLambda is an HTTP API handler (payload format 2.0), as Lambda calls it.
type HTTPLambda func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Timeouts of the HTTP API's server. A client must send its headers within
// HTTPHeaderTimeout and its whole request within HTTPReadTimeout (a body
// trickled a byte at a time cannot hold a connection open); a response gets
// HTTPWriteTimeout (API Gateway's 30 s integration limit, and a margin); an
// idle keep-alive connection is closed after HTTPIdleTimeout.
const (
	HTTPHeaderTimeout = 10 * time.Second
	HTTPReadTimeout   = 15 * time.Second
	HTTPWriteTimeout  = 35 * time.Second
	HTTPIdleTimeout   = 60 * time.Second
)

// NewHTTPServer returns the server of an HTTP API with those timeouts;
// readTimeout, when positive, replaces HTTPReadTimeout (tests).
func NewHTTPServer(api *HTTPAPI, readTimeout time.Duration) *http.Server {
	if readTimeout <= 0 {
		readTimeout = HTTPReadTimeout
	}
	return &http.Server{Handler: api, ReadHeaderTimeout: min(HTTPHeaderTimeout, readTimeout), ReadTimeout: readTimeout,
		WriteTimeout: HTTPWriteTimeout, IdleTimeout: HTTPIdleTimeout}
}

// HTTPAPI emulates an API Gateway HTTP API: it matches "METHOD /path/{param}"
// routes, builds the 2.0 event (routeKey, rawPath, lower-case headers,
// pathParameters, requestContext) and writes the Lambda's response.
type HTTPAPI struct {
	// Routes by route key, e.g. "GET /v1/messages/{id}".
	Routes map[string]HTTPLambda
	// MaxBody is API Gateway's payload limit (default 10 MB).
	MaxBody int64
	// Log receives structured logs (slog.Default when nil).
	Log *slog.Logger
}

// match finds the route for method and path and its path parameters.
func (a *HTTPAPI) match(method, path string) (string, map[string]string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for key := range a.Routes {
		m, tmpl, _ := strings.Cut(key, " ")
		if m != method {
			continue
		}
		tparts := strings.Split(strings.Trim(tmpl, "/"), "/")
		if len(tparts) != len(parts) {
			continue
		}
		params := map[string]string{}
		ok := true
		for i, tp := range tparts {
			if strings.HasPrefix(tp, "{") && strings.HasSuffix(tp, "}") {
				if parts[i] == "" {
					ok = false
					break
				}
				params[tp[1:len(tp)-1]] = parts[i]
			} else if tp != parts[i] {
				ok = false
				break
			}
		}
		if ok {
			return key, params
		}
	}
	return "", nil
}

func (a *HTTPAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, params := a.match(r.Method, r.URL.Path)
	if key == "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"message":"Not Found"}`)
		return
	}
	limit := a.MaxBody
	if limit <= 0 {
		limit = 10 << 20
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil || int64(len(body)) > limit {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = io.WriteString(w, `{"message":"Request Entity Too Large"}`)
		return
	}
	headers := map[string]string{}
	for k, v := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	query := map[string]string{}
	for k, v := range r.URL.Query() {
		query[k] = strings.Join(v, ",")
	}
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: key, RawPath: r.URL.Path, RawQueryString: r.URL.RawQuery,
		Headers: headers, QueryStringParameters: query, PathParameters: params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: key, Stage: "$default", RequestID: newID(12), APIID: "local", DomainName: r.Host,
			TimeEpoch: time.Now().UnixMilli(),
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: r.Method, Path: r.URL.Path, Protocol: r.Proto, SourceIP: strings.Split(r.RemoteAddr, ":")[0], UserAgent: r.UserAgent()},
		},
	}
	if utf8.Valid(body) {
		ev.Body = string(body)
	} else {
		ev.Body, ev.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
	}
	resp, err := a.Routes[key](r.Context(), ev)
	if err != nil {
		log := a.Log
		if log == nil {
			log = slog.Default()
		}
		log.Error("http route handler failed", "route", key, "err", err.Error())
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"message":"Internal Server Error"}`)
		return
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	out := []byte(resp.Body)
	if resp.IsBase64Encoded {
		out, _ = base64.StdEncoding.DecodeString(resp.Body)
	}
	_, _ = w.Write(out)
}
