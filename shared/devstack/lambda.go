package devstack

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/signet-im/signet/shared/eventsource"
)

// DefaultConcurrency is the account concurrency of a new AWS account: at
// most this many invocations of all functions run at once.
const DefaultConcurrency = 10

// runtime runs handlers as the Lambda service would: each invocation takes
// one slot of the account's concurrency or is throttled at once, runs with
// its function's timeout as the context deadline, and is not cancelled
// when the caller goes away (a client closing its WebSocket does not stop
// the invocation its frame started).
type runtime struct {
	slots chan struct{}
	log   func(msg string, args ...any)

	mu        sync.Mutex
	throttles map[string]int
	timeouts  map[string]int
	metered   map[string]Invocations
	running   atomic.Int64
}

// Invocations is what Lambda bills for one function: requests, and
// duration (rounded up to the millisecond) times configured memory.
type Invocations struct {
	Requests  int64
	GBSeconds float64
}

func newRuntime(concurrency int, log func(string, ...any)) *runtime {
	return &runtime{slots: make(chan struct{}, concurrency), log: log, throttles: map[string]int{}, timeouts: map[string]int{}}
}

// ThrottleError is Lambda's answer when the account's concurrency is in use
// (TooManyRequestsException, "Rate Exceeded.").
type ThrottleError struct{ Function string }

func (e *ThrottleError) Error() string {
	return fmt.Sprintf("%s: TooManyRequestsException: Rate Exceeded. (account concurrency limit reached)", e.Function)
}

// Is makes a throttle eventsource.ErrThrottled: an SQS event source
// retries the batch soon instead of leaving it for the visibility timeout.
func (e *ThrottleError) Is(target error) bool { return target == eventsource.ErrThrottled }

// TimeoutError is an invocation that ran past its function's timeout.
type TimeoutError struct {
	Function string
	Timeout  time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s: Task timed out after %.2f seconds", e.Function, e.Timeout.Seconds())
}

var invocations atomic.Int64

// invoke runs h for fn within the runtime's limits.
func invoke[In, Out any](rt *runtime, fn *function, h func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		var zero Out
		select {
		case rt.slots <- struct{}{}:
		default:
			rt.mu.Lock()
			rt.throttles[fn.id]++
			rt.mu.Unlock()
			rt.log("lambda throttled: account concurrency limit reached", "function", fn.id, "limit", cap(rt.slots))
			return zero, &ThrottleError{Function: fn.id}
		}
		rt.running.Add(1)
		started := time.Now()
		release := sync.OnceFunc(func() {
			// Metered before it stops counting as running: whoever waits
			// for Running() == 0 then reads it in Metered (a test read
			// the meter between the two once, and missed the invocation).
			rt.meter(fn, time.Since(started))
			rt.running.Add(-1)
			<-rt.slots
		})
		deadline := time.Now().Add(fn.timeout)
		ictx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		ictx = lambdacontext.NewContext(ictx, &lambdacontext.LambdaContext{
			AwsRequestID:       fmt.Sprintf("local-%d", invocations.Add(1)),
			InvokedFunctionArn: fn.arn,
		})
		type result struct {
			out Out
			err error
		}
		defer cancel()
		done := make(chan result, 1)
		go func() {
			defer release()
			out, err := h(ictx, in)
			// Released before the caller has the answer, as Lambda frees
			// an execution when its handler returns: a caller that
			// invokes again at once finds the slot free (and the
			// invocation metered).
			release()
			done <- result{out, err}
		}()
		select {
		case r := <-done:
			return r.out, r.err
		case <-ictx.Done():
			// Only the deadline ends ictx before the handler returns (it
			// is never cancelled while the handler runs), but a handler
			// that finished just then still answers.
			select {
			case r := <-done:
				return r.out, r.err
			default:
			}
			// Lambda stops the instance at the deadline: its slot is free
			// and the caller sees an invocation error, whatever the
			// handler would still have done.
			release()
			rt.mu.Lock()
			rt.timeouts[fn.id]++
			rt.mu.Unlock()
			rt.log("lambda timed out", "function", fn.id, "timeout", fn.timeout.String())
			return zero, &TimeoutError{Function: fn.id, Timeout: fn.timeout}
		}
	}
}

// meter records one invocation of fn that ran for d.
func (rt *runtime) meter(fn *function, d time.Duration) {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.metered == nil {
		rt.metered = map[string]Invocations{}
	}
	m := rt.metered[fn.id]
	m.Requests++
	m.GBSeconds += float64(ms) / 1000 * float64(fn.memoryMB) / 1024
	rt.metered[fn.id] = m
}

// invocations returns a copy of the metered invocations by function.
func (rt *runtime) invocations() map[string]Invocations {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make(map[string]Invocations, len(rt.metered))
	for k, v := range rt.metered {
		out[k] = v
	}
	return out
}

// wrap puts a handler method of any Lambda shape Signet uses under the
// runtime's limits.
func wrap(rt *runtime, fn *function, h any) (any, error) {
	switch h := h.(type) {
	case func(context.Context, events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error):
		return invoke(rt, fn, h), nil
	case func(context.Context, events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error):
		return invoke(rt, fn, h), nil
	case func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error):
		return invoke(rt, fn, h), nil
	case func(context.Context, events.SQSEvent) (events.SQSEventResponse, error):
		return invoke(rt, fn, h), nil
	}
	return nil, fmt.Errorf("function %s: handler of type %T is not a Lambda shape the local stack runs", fn.id, h)
}

// Limits counts what the runtime refused: throttled invocations and
// timeouts, by function logical id.
type Limits struct {
	Throttles, Timeouts map[string]int
}

func (rt *runtime) limits() Limits {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	l := Limits{Throttles: map[string]int{}, Timeouts: map[string]int{}}
	for k, v := range rt.throttles {
		l.Throttles[k] = v
	}
	for k, v := range rt.timeouts {
		l.Timeouts[k] = v
	}
	return l
}
