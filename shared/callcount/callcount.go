// Package callcount counts AWS SDK calls per service and operation with a
// middleware, and estimates the DynamoDB write capacity units they consume,
// so benchmarks can report the cost of a delivered message.
//
// Write units are estimated from request payloads by DynamoDB's rules: an
// item's size is the sum of its attribute names and values; each write costs
// one unit per started KB; transactional writes cost double. Read units
// come from the items a read returned: one unit per started 4 KB (of each
// item for GetItem and batch gets, of the page for Query and Scan), half for
// an eventually consistent read, double in a transaction. For UpdateItem
// and transactional Updates the size is that of the key plus the values the
// update sets, which is exact for Signet's updated items (small counters) and
// a lower bound in general; an UpdateItem that returns the whole item as it
// was (ALL_OLD: an ack's write of the device's cursor item, which carries
// its pending ack ranges) is counted as that item plus the values set.
package callcount

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// Counter counts calls; safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	calls  map[string]int // "Service.Operation" → count
	wcu    int
	rru    float64
	stored map[string]int64 // table → bytes of items put (with DynamoDB's 100-byte overhead)
	// wcuBy and rruBy are wcu and rru by table name (tables of another
	// class are priced apart).
	wcuBy map[string]int
	rruBy map[string]float64
	// wcuByCall and rruByCall split them by operation and table
	// ("PutItem Inbox"), to say which calls a message's units go to.
	wcuByCall map[string]int
	rruByCall map[string]float64
}

// New returns an empty counter.
func New() *Counter {
	return &Counter{
		calls: map[string]int{}, stored: map[string]int64{},
		wcuBy: map[string]int{}, rruBy: map[string]float64{},
		wcuByCall: map[string]int{}, rruByCall: map[string]float64{},
	}
}

// APIOptions returns the SDK option that installs the counting middleware.
func (c *Counter) APIOptions() []func(*middleware.Stack) error {
	return []func(*middleware.Stack) error{func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("signet-callcount",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				c.record(awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx), in.Parameters)
				out, md, err := next.HandleInitialize(ctx, in)
				if err == nil {
					c.recordRead(awsmiddleware.GetOperationName(ctx), in.Parameters, out.Result)
					c.recordUpdatedItem(awsmiddleware.GetOperationName(ctx), in.Parameters, out.Result)
				}
				return out, md, err
			}), middleware.After)
	}}
}

func (c *Counter) record(service, op string, params any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[service+"."+op]++
	writeUnits(params, func(table string, wcu int) {
		c.wcu += wcu
		c.wcuBy[table] += wcu
		c.wcuByCall[op+" "+table] += wcu
	})
	putBytes(params, func(table string, n int) { c.stored[table] += int64(n) + itemOverhead })
}

func (c *Counter) recordRead(op string, params, result any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	readUnits(params, result, func(table string, rru float64) {
		c.rru += rru
		c.rruBy[table] += rru
		c.rruByCall[op+" "+table] += rru
	})
}

// recordUpdatedItem adds what an UpdateItem cost beyond its key and values
// when it returned the whole item as it was (ALL_OLD): DynamoDB bills the
// larger of the item before and after, and after is at most before plus
// the values set (a device's cursor item carries its pending ack ranges).
func (c *Counter) recordUpdatedItem(op string, params, result any) {
	in, ok := params.(*dynamodb.UpdateItemInput)
	out, _ := result.(*dynamodb.UpdateItemOutput)
	if !ok || out == nil || in.ReturnValues != types.ReturnValueAllOld || len(out.Attributes) == 0 {
		return
	}
	estimated := units(itemSize(in.Key) + itemSize(in.ExpressionAttributeValues))
	extra := units(itemSize(out.Attributes)+itemSize(in.ExpressionAttributeValues)) - estimated
	if extra <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	table := aws.ToString(in.TableName)
	c.wcu += extra
	c.wcuBy[table] += extra
	c.wcuByCall[op+" "+table] += extra
}

// itemOverhead is what DynamoDB adds to each stored item for billing.
const itemOverhead = 100

// Snapshot is a copy of the counts at one moment.
type Snapshot struct {
	Calls map[string]int
	WCU   int
	RRU   float64
	// Stored is bytes of items put, by table name (overwrites included:
	// an upper bound on what a table grows by).
	Stored map[string]int64
	// WCUBy and RRUBy split WCU and RRU by table name.
	WCUBy map[string]int
	RRUBy map[string]float64
	// WCUByCall and RRUByCall split them by operation and table name
	// ("PutItem signet-InboxTable").
	WCUByCall map[string]int
	RRUByCall map[string]float64
}

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Snapshot{
		Calls: maps.Clone(c.calls), WCU: c.wcu, RRU: c.rru, Stored: maps.Clone(c.stored),
		WCUBy: maps.Clone(c.wcuBy), RRUBy: maps.Clone(c.rruBy),
		WCUByCall: maps.Clone(c.wcuByCall), RRUByCall: maps.Clone(c.rruByCall),
	}
}

// Sub returns the counts of s minus those of earlier.
func (s Snapshot) Sub(earlier Snapshot) Snapshot {
	return Snapshot{
		Calls: sub(s.Calls, earlier.Calls), WCU: s.WCU - earlier.WCU, RRU: s.RRU - earlier.RRU,
		Stored: sub(s.Stored, earlier.Stored), WCUBy: sub(s.WCUBy, earlier.WCUBy), RRUBy: sub(s.RRUBy, earlier.RRUBy),
		WCUByCall: sub(s.WCUByCall, earlier.WCUByCall), RRUByCall: sub(s.RRUByCall, earlier.RRUByCall),
	}
}

// sub returns the non-zero differences of m minus earlier, key by key.
func sub[V int | int64 | float64](m, earlier map[string]V) map[string]V {
	out := map[string]V{}
	for k, v := range m {
		if d := v - earlier[k]; d != 0 {
			out[k] = d
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

// writeUnits estimates the write capacity units of a DynamoDB request and
// passes them to f by table.
func writeUnits(params any, f func(table string, wcu int)) {
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		f(aws.ToString(in.TableName), units(itemSize(in.Item)))
	case *dynamodb.UpdateItemInput:
		f(aws.ToString(in.TableName), units(itemSize(in.Key)+itemSize(in.ExpressionAttributeValues)))
	case *dynamodb.DeleteItemInput:
		f(aws.ToString(in.TableName), units(itemSize(in.Key)))
	case *dynamodb.BatchWriteItemInput:
		for table, reqs := range in.RequestItems {
			for _, r := range reqs {
				if r.PutRequest != nil {
					f(table, units(itemSize(r.PutRequest.Item)))
				} else if r.DeleteRequest != nil {
					f(table, units(itemSize(r.DeleteRequest.Key)))
				}
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				f(aws.ToString(it.Put.TableName), 2*units(itemSize(it.Put.Item)))
			case it.Update != nil:
				f(aws.ToString(it.Update.TableName), 2*units(itemSize(it.Update.Key)+itemSize(it.Update.ExpressionAttributeValues)))
			case it.Delete != nil:
				f(aws.ToString(it.Delete.TableName), 2*units(itemSize(it.Delete.Key)))
			case it.ConditionCheck != nil:
				f(aws.ToString(it.ConditionCheck.TableName), 2*units(itemSize(it.ConditionCheck.Key)))
			}
		}
	}
}

func units(bytes int) int { return max(1, (bytes+1023)/1024) }

// putBytes reports the size of every item a request puts, by table.
func putBytes(params any, f func(table string, n int)) {
	switch in := params.(type) {
	case *dynamodb.PutItemInput:
		f(aws.ToString(in.TableName), itemSize(in.Item))
	case *dynamodb.BatchWriteItemInput:
		for table, reqs := range in.RequestItems {
			for _, r := range reqs {
				if r.PutRequest != nil {
					f(table, itemSize(r.PutRequest.Item))
				}
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		for _, it := range in.TransactItems {
			if it.Put != nil {
				f(aws.ToString(it.Put.TableName), itemSize(it.Put.Item))
			}
		}
	}
}

func totalSize(items []map[string]types.AttributeValue) int {
	n := 0
	for _, it := range items {
		n += itemSize(it)
	}
	return n
}

// readUnits computes the read capacity units of a DynamoDB read from the
// items it returned, and passes them to f by table.
func readUnits(params, result any, f func(table string, rru float64)) {
	rate := func(consistent *bool) float64 {
		if aws.ToBool(consistent) {
			return 1
		}
		return 0.5
	}
	pages := func(n int) float64 { return float64(max(1, (n+4095)/4096)) }
	switch out := result.(type) {
	case *dynamodb.GetItemOutput:
		in, _ := params.(*dynamodb.GetItemInput)
		if in == nil {
			in = &dynamodb.GetItemInput{}
		}
		f(aws.ToString(in.TableName), pages(itemSize(out.Item))*rate(in.ConsistentRead))
	case *dynamodb.QueryOutput:
		in, _ := params.(*dynamodb.QueryInput)
		if in == nil {
			in = &dynamodb.QueryInput{}
		}
		f(aws.ToString(in.TableName), pages(totalSize(out.Items))*rate(in.ConsistentRead))
	case *dynamodb.ScanOutput:
		in, _ := params.(*dynamodb.ScanInput)
		if in == nil {
			in = &dynamodb.ScanInput{}
		}
		f(aws.ToString(in.TableName), pages(totalSize(out.Items))*rate(in.ConsistentRead))
	case *dynamodb.BatchGetItemOutput:
		in, _ := params.(*dynamodb.BatchGetItemInput)
		for table, items := range out.Responses {
			var consistent *bool
			if in != nil {
				consistent = in.RequestItems[table].ConsistentRead
			}
			for _, it := range items {
				f(table, pages(itemSize(it))*rate(consistent))
			}
		}
	case *dynamodb.TransactGetItemsOutput:
		in, _ := params.(*dynamodb.TransactGetItemsInput)
		for i, r := range out.Responses {
			table := ""
			if in != nil && i < len(in.TransactItems) && in.TransactItems[i].Get != nil {
				table = aws.ToString(in.TransactItems[i].Get.TableName)
			}
			f(table, 2*pages(itemSize(r.Item)))
		}
	}
}

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
