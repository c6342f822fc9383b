// Package callcount counts AWS SDK calls per service and operation with a
// middleware, and estimates the DynamoDB write capacity units they consume,
// so benchmarks can report the cost of a delivered message.
//
// Write units are estimated from request payloads by DynamoDB's rules: an
// item's size is the sum of its attribute names and values; each write costs
// one unit per started KB; transactional writes cost double. For UpdateItem
// and transactional Updates the size is that of the key plus the values the
// update sets, which is exact for Signet's updated items (small counters) and
// a lower bound in general.
package callcount

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// Counter counts calls; safe for concurrent use.
type Counter struct {
	mu    sync.Mutex
	calls map[string]int // "Service.Operation" → count
	wcu   int
}

// New returns an empty counter.
func New() *Counter { return &Counter{calls: map[string]int{}} }

// APIOptions returns the SDK option that installs the counting middleware.
func (c *Counter) APIOptions() []func(*middleware.Stack) error {
	return []func(*middleware.Stack) error{func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("signet-callcount",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				c.record(awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx), in.Parameters)
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	}}
}

func (c *Counter) record(service, op string, params any) {
	wcu := writeUnits(params)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[service+"."+op]++
	c.wcu += wcu
}

// Snapshot is a copy of the counts at one moment.
type Snapshot struct {
	Calls map[string]int
	WCU   int
}

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := make(map[string]int, len(c.calls))
	for k, v := range c.calls {
		calls[k] = v
	}
	return Snapshot{Calls: calls, WCU: c.wcu}
}

// Sub returns the counts of s minus those of earlier.
func (s Snapshot) Sub(earlier Snapshot) Snapshot {
	out := Snapshot{Calls: map[string]int{}, WCU: s.WCU - earlier.WCU}
	for k, v := range s.Calls {
		if d := v - earlier.Calls[k]; d != 0 {
			out.Calls[k] = d
		}
	}
	return out
}

// Service returns the number of calls to one service (e.g. "DynamoDB").
func (s Snapshot) Service(service string) int {
	n := 0
	for k, v := range s.Calls {
		if strings.HasPrefix(k, service+".") {
			n += v
		}
	}
	return n
}

// Table renders the counts divided by per (labelled "per <unit>"), one
// operation a line.
func (s Snapshot) Table(per int, unit string) string {
	keys := make([]string, 0, len(s.Calls))
	for k := range s.Calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-40s %8d  %6.2f per %s\n", k, s.Calls[k], float64(s.Calls[k])/float64(per), unit)
	}
	fmt.Fprintf(&b, "  %-40s %8d  %6.2f per %s\n", "DynamoDB write units (estimated)", s.WCU, float64(s.WCU)/float64(per), unit)
	return b.String()
}

// writeUnits estimates the write capacity units of a DynamoDB request.
func writeUnits(params any) int {
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		return units(itemSize(in.Item))
	case *dynamodb.UpdateItemInput:
		return units(itemSize(in.Key) + itemSize(in.ExpressionAttributeValues))
	case *dynamodb.DeleteItemInput:
		return units(itemSize(in.Key))
	case *dynamodb.BatchWriteItemInput:
		n := 0
		for _, reqs := range in.RequestItems {
			for _, r := range reqs {
				if r.PutRequest != nil {
					n += units(itemSize(r.PutRequest.Item))
				} else if r.DeleteRequest != nil {
					n += units(itemSize(r.DeleteRequest.Key))
				}
			}
		}
		return n
	case *dynamodb.TransactWriteItemsInput:
		n := 0
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				n += 2 * units(itemSize(it.Put.Item))
			case it.Update != nil:
				n += 2 * units(itemSize(it.Update.Key)+itemSize(it.Update.ExpressionAttributeValues))
			case it.Delete != nil:
				n += 2 * units(itemSize(it.Delete.Key))
			case it.ConditionCheck != nil:
				n += 2 * units(itemSize(it.ConditionCheck.Key))
			}
		}
		return n
	}
	return 0
}

func units(bytes int) int { return max(1, (bytes+1023)/1024) }

func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(strings.TrimPrefix(k, ":")) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return (len(v.Value)+1)/2 + 1
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberM:
		return 3 + itemSize(v.Value)
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	}
	return 0
}
