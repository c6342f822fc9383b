package memdyn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"

	"github.com/signet-im/signet/shared/journal"
)

// Server is the DynamoDB JSON API (X-Amz-Target DynamoDB_20120810.*).
type Server struct {
	mu     sync.Mutex
	tables map[string]*table
	// journal, when set (Open), receives every change; pending holds the
	// records of the call being served until it is answered.
	journal *journal.Journal
	pending [][]byte
	// staleReads, when positive (NewStale), is how far behind the replica
	// of each table is that half of the eventually consistent reads are
	// answered from; coin decides which half.
	staleReads time.Duration
	coin       *rand.Rand
}

// New returns an empty server.
func New() *Server { return &Server{tables: map[string]*table{}} }

// NewStale returns an empty server whose eventually consistent reads
// (GetItem, BatchGetItem, Query and Scan without ConsistentRead) are
// answered, one in two at random, from a replica of the table that is lag
// behind: the item as it was then, or none. DynamoDB documents that such a
// read "might not reflect the results of a recently completed write" (a
// replica that has not caught up); the other emulators answer every read
// from the latest write, which hides the code that relies on reading its
// own writes eventually consistent. Strongly consistent reads and
// transactions see every write.
func NewStale(lag time.Duration, seed uint64) *Server {
	s := New()
	s.staleReads, s.coin = lag, rand.New(rand.NewPCG(seed, seed))
	return s
}

// stale reports whether a read is answered from the replica: eventually
// consistent, on a server with stale reads, and the coin says so (called
// with s.mu held).
func (s *Server) stale(consistent *bool) bool {
	return s.staleReads > 0 && (consistent == nil || !*consistent) && s.coin.IntN(2) == 0
}

// Start serves a new server on a free 127.0.0.1 port and returns its
// endpoint and a stop function.
func Start() (endpoint string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: New()}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// apiError is an error answer: its __type (without the namespace) and message.
type apiError struct {
	typ, msg string
	extra    map[string]any
}

func (e *apiError) Error() string { return e.typ + ": " + e.msg }

func validation(format string, a ...any) error {
	return &apiError{typ: "ValidationException", msg: fmt.Sprintf(format, a...)}
}

func notFound() error {
	return &apiError{typ: "ResourceNotFoundException", msg: "Requested resource not found"}
}

func conditionFailed(old Item, rv string) error {
	e := &apiError{typ: "ConditionalCheckFailedException", msg: "The conditional request failed"}
	if rv == "ALL_OLD" && old != nil {
		e.extra = map[string]any{"Item": old}
	}
	return e
}

// ServeHTTP dispatches one API call.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndex(op, ".")+1:]
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return
	}
	out, err := s.call(op, body)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{typ: "ValidationException", msg: err.Error()}
		}
		resp := map[string]any{"__type": "com.amazonaws.dynamodb.v20120810#" + ae.typ, "message": ae.msg}
		for k, v := range ae.extra {
			resp[k] = v
		}
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(resp)
		return
	}
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) call(op string, body []byte) (any, error) {
	handlers := map[string]func([]byte) (any, error){
		"CreateTable": s.createTable, "DeleteTable": s.deleteTable, "DescribeTable": s.describeTable, "ListTables": s.listTables,
		"UpdateTimeToLive": s.updateTTL, "DescribeTimeToLive": s.describeTTL,
		"GetItem": s.getItem, "PutItem": s.putItem, "UpdateItem": s.updateItem, "DeleteItem": s.deleteItem, "Query": s.query, "Scan": s.scan,
		"BatchGetItem": s.batchGet, "BatchWriteItem": s.batchWrite, "TransactWriteItems": s.transactWrite, "TransactGetItems": s.transactGet,
	}
	h, ok := handlers[op]
	if !ok {
		return nil, &apiError{typ: "UnknownOperationException", msg: "memdyn does not implement " + op}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out, err := h(body)
	// Whatever the call changed is journaled before it is answered, also
	// when it failed part-way (a batch write stopped by an oversize item).
	if ferr := s.flush(); ferr != nil {
		return nil, ferr
	}
	return out, err
}

func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return validation("request body: %v", err)
	}
	return nil
}

func (s *Server) table(name string) (*table, error) {
	t, ok := s.tables[name]
	if !ok {
		return nil, notFound()
	}
	return t, nil
}

// tableOf is the table a request of one TableName names.
func (s *Server) tableOf(body []byte) (*table, error) {
	var in struct{ TableName string }
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	return s.table(in.TableName)
}

func (s *Server) createTable(body []byte) (any, error) {
	var in struct {
		TableName            string
		KeySchema            []struct{ AttributeName, KeyType string }
		AttributeDefinitions []map[string]string
		GlobalSecondaryIndexes,
		LocalSecondaryIndexes []any
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if len(in.GlobalSecondaryIndexes)+len(in.LocalSecondaryIndexes) > 0 {
		return nil, validation("memdyn does not implement secondary indexes")
	}
	if _, ok := s.tables[in.TableName]; ok {
		return nil, &apiError{typ: "ResourceInUseException", msg: "Table already exists: " + in.TableName}
	}
	types := map[string]string{}
	for _, d := range in.AttributeDefinitions {
		types[d["AttributeName"]] = d["AttributeType"]
	}
	var hash *keyDef
	var rng *keyDef
	for _, k := range in.KeySchema {
		kd := &keyDef{name: k.AttributeName, typ: types[k.AttributeName]}
		if kd.typ != "S" && kd.typ != "N" && kd.typ != "B" {
			return nil, validation("key attribute %s needs an attribute definition of type S, N or B", k.AttributeName)
		}
		switch k.KeyType {
		case "HASH":
			hash = kd
		case "RANGE":
			rng = kd
		}
	}
	if in.TableName == "" || hash == nil {
		return nil, validation("a table needs a name and a HASH key")
	}
	t := newTable(in.TableName, *hash, rng, in.AttributeDefinitions)
	if s.staleReads > 0 {
		t.replica, t.lag = btree.NewG(32, less), s.staleReads
	}
	t.def = compactJSON(body)
	s.tables[in.TableName] = t
	t.record = s.note
	s.note(record{Op: "table", Def: t.def})
	return map[string]any{"TableDescription": t.describe()}, nil
}

func (s *Server) deleteTable(body []byte) (any, error) {
	t, err := s.tableOf(body)
	if err != nil {
		return nil, err
	}
	delete(s.tables, t.name)
	if s.journal != nil {
		s.note(record{Op: "drop", Table: t.name})
	}
	d := t.describe()
	d["TableStatus"] = "DELETING"
	return map[string]any{"TableDescription": d}, nil
}

func (s *Server) describeTable(body []byte) (any, error) {
	t, err := s.tableOf(body)
	if err != nil {
		return nil, err
	}
	return map[string]any{"Table": t.describe()}, nil
}

func (s *Server) listTables([]byte) (any, error) {
	names := make([]string, 0, len(s.tables))
	for n := range s.tables {
		names = append(names, n)
	}
	sort.Strings(names)
	return map[string]any{"TableNames": names}, nil
}

func (s *Server) updateTTL(body []byte) (any, error) {
	var in struct {
		TableName               string
		TimeToLiveSpecification struct {
			AttributeName string
			Enabled       bool
		}
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	t, err := s.table(in.TableName)
	if err != nil {
		return nil, err
	}
	t.ttlAttr, t.ttlOn = in.TimeToLiveSpecification.AttributeName, in.TimeToLiveSpecification.Enabled
	if s.journal != nil {
		s.note(record{Op: "ttl", Def: compactJSON(body)})
	}
	return map[string]any{"TimeToLiveSpecification": map[string]any{"AttributeName": t.ttlAttr, "Enabled": t.ttlOn}}, nil
}

func (s *Server) describeTTL(body []byte) (any, error) {
	t, err := s.tableOf(body)
	if err != nil {
		return nil, err
	}
	desc := map[string]any{"TimeToLiveStatus": "DISABLED"}
	if t.ttlOn {
		desc = map[string]any{"TimeToLiveStatus": "ENABLED", "AttributeName": t.ttlAttr}
	}
	return map[string]any{"TimeToLiveDescription": desc}, nil
}

// exprs are the expression parts of a request.
type exprs struct {
	ExpressionAttributeNames  map[string]string
	ExpressionAttributeValues map[string]*Value
}

func (x exprs) env() *env {
	return &env{names: x.ExpressionAttributeNames, values: x.ExpressionAttributeValues, used: map[string]bool{}}
}

// checkUsed refuses names and values no expression used, as DynamoDB does.
func (e *env) checkUsed() error {
	var names, values []string
	for k := range e.names {
		if !e.used[k] {
			names = append(names, k)
		}
	}
	for k, v := range e.values {
		if !e.used[k] {
			values = append(values, k)
		}
		if err := v.validate(); err != nil {
			return validation("ExpressionAttributeValues contains invalid value: %v for key %s", err, k)
		}
	}
	if len(names) > 0 {
		sort.Strings(names)
		return validation("Value provided in ExpressionAttributeNames unused in expressions: keys: {%s}", strings.Join(names, ", "))
	}
	if len(values) > 0 {
		sort.Strings(values)
		return validation("Value provided in ExpressionAttributeValues unused in expressions: keys: {%s}", strings.Join(values, ", "))
	}
	return nil
}

// write is one conditional write, parsed: a put, an update, a delete or a
// condition check on one item.
type write struct {
	t        *table
	key      *entry
	kind     string // put, update, delete, check
	item     Item   // put
	cond     cond
	upd      update
	touched  []string
	rvOnFail string
	// keyValues are the request's key attributes (update, delete, check).
	keyValues Item
}

type writeInput struct {
	exprs
	TableName                           string
	Key, Item                           Item
	ConditionExpression                 *string
	UpdateExpression                    *string
	ReturnValues                        string
	ReturnValuesOnConditionCheckFailure string
	Expected, AttributeUpdates          map[string]any
}

func (s *Server) parseWrite(kind string, in writeInput) (*write, error) {
	if in.Expected != nil || in.AttributeUpdates != nil {
		return nil, validation("memdyn does not implement the legacy Expected and AttributeUpdates parameters")
	}
	t, err := s.table(in.TableName)
	if err != nil {
		return nil, err
	}
	w := &write{t: t, kind: kind, rvOnFail: in.ReturnValuesOnConditionCheckFailure}
	e := in.env()
	if kind == "put" {
		for name, v := range in.Item {
			if err := v.validate(); err != nil {
				return nil, validation("one or more parameter values were invalid: %s: %v", name, err)
			}
		}
		if w.key, err = t.keyOf(in.Item, false); err != nil {
			return nil, validation("one or more parameter values were invalid: missing the key %s in the item (or a key of the wrong type)", t.hash.name)
		}
		w.item = in.Item.clone()
	} else if w.key, err = t.keyOf(in.Key, true); err != nil {
		return nil, validation("%v", err)
	} else {
		w.keyValues = in.Key.clone()
	}
	if in.ConditionExpression != nil {
		if w.cond, err = parseCondition(*in.ConditionExpression, e); err != nil {
			return nil, validation("Invalid ConditionExpression: %v", err)
		}
	}
	if kind == "update" {
		if in.UpdateExpression == nil {
			return nil, validation("memdyn needs an UpdateExpression")
		}
		if w.upd, w.touched, err = parseUpdate(*in.UpdateExpression, e); err != nil {
			return nil, validation("Invalid UpdateExpression: %v", err)
		}
		for _, a := range w.touched {
			if a == t.hash.name || (t.rng != nil && a == t.rng.name) {
				return nil, validation("One or more parameter values were invalid: Cannot update attribute %s. This attribute is part of the key", a)
			}
		}
	}
	if kind == "check" && w.cond == nil {
		return nil, validation("a ConditionCheck needs a ConditionExpression")
	}
	if err := e.checkUsed(); err != nil {
		return nil, err
	}
	return w, nil
}

// check evaluates the write's condition on the current item.
func (w *write) check() (old Item, ok bool) {
	old = w.t.get(w.key)
	if w.cond == nil {
		return old, true
	}
	probe := old
	if probe == nil {
		probe = Item{}
	}
	return old, w.cond(probe)
}

// apply makes the write (its condition already held) and returns the old
// and new items.
func (w *write) apply() (old, now Item, err error) {
	old = w.t.get(w.key)
	switch w.kind {
	case "put":
		now = w.item
		if err := w.t.put(w.key, now); err != nil {
			return nil, nil, err
		}
	case "delete":
		if old != nil {
			w.t.remove(w.key)
		}
	case "update":
		if old != nil {
			now = old.clone()
		} else {
			now = Item{}
			for k, v := range w.t.keyAttrs(w.keyItem()) {
				now[k] = v.clone()
			}
		}
		if err := w.upd(now); err != nil {
			return nil, nil, validation("%v", err)
		}
		if err := w.t.put(w.key, now); err != nil {
			return nil, nil, err
		}
	}
	return old, now, nil
}

// keyItem rebuilds the key attributes of the write's key.
func (w *write) keyItem() Item {
	if w.item != nil {
		return w.item
	}
	return w.keyValues
}

func (s *Server) getItem(body []byte) (any, error) {
	var in struct {
		exprs
		TableName            string
		Key                  Item
		ProjectionExpression *string
		AttributesToGet      []string
		ConsistentRead       *bool
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	t, err := s.table(in.TableName)
	if err != nil {
		return nil, err
	}
	k, err := t.keyOf(in.Key, true)
	if err != nil {
		return nil, validation("%v", err)
	}
	proj, err := projection(in.ProjectionExpression, in.exprs)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if it := t.getFrom(t.view(s.stale(in.ConsistentRead)), k); it != nil {
		out["Item"] = project(it, proj)
	}
	return out, nil
}

func projection(expr *string, x exprs) ([]path, error) {
	e := x.env()
	var proj []path
	if expr != nil {
		var err error
		if proj, err = parseProjection(*expr, e); err != nil {
			return nil, validation("Invalid ProjectionExpression: %v", err)
		}
	}
	return proj, e.checkUsed()
}

func (s *Server) single(kind string, body []byte) (any, error) {
	var in writeInput
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	w, err := s.parseWrite(kind, in)
	if err != nil {
		return nil, err
	}
	if old, ok := w.check(); !ok {
		return nil, conditionFailed(old, in.ReturnValuesOnConditionCheckFailure)
	}
	old, now, err := w.apply()
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	var attrs Item
	switch in.ReturnValues {
	case "", "NONE":
	case "ALL_OLD":
		attrs = old
	case "ALL_NEW":
		attrs = now
	case "UPDATED_OLD", "UPDATED_NEW":
		if kind != "update" {
			return nil, validation("ReturnValues %s is only valid for UpdateItem", in.ReturnValues)
		}
		src := old
		if in.ReturnValues == "UPDATED_NEW" {
			src = now
		}
		attrs = Item{}
		for _, a := range w.touched {
			if v, ok := src[a]; ok {
				attrs[a] = v
			}
		}
	default:
		return nil, validation("invalid ReturnValues %q", in.ReturnValues)
	}
	if len(attrs) > 0 {
		out["Attributes"] = attrs
	}
	return out, nil
}

func (s *Server) putItem(body []byte) (any, error)    { return s.single("put", body) }
func (s *Server) updateItem(body []byte) (any, error) { return s.single("update", body) }
func (s *Server) deleteItem(body []byte) (any, error) { return s.single("delete", body) }

// readInput is what Query and Scan share: filter, projection and paging.
type readInput struct {
	exprs
	TableName            string
	IndexName            *string
	FilterExpression     *string
	ProjectionExpression *string
	Limit                *int
	ExclusiveStartKey    Item
	Select               string
	ConsistentRead       *bool
}

// page is a parsed Query or Scan: its table, the items it reads (the
// table's, or its replica's for a stale read) and what it keeps of each.
type page struct {
	t      *table
	items  *btree.BTreeG[*entry]
	filter cond
	proj   []path
	limit  int
	after  *entry
	count  bool
}

// parsePage checks a read's table, expressions and paging; keyCond parses
// a Query's key condition in the same expression environment (nil for a
// Scan).
func (s *Server) parsePage(in readInput, keyCond func(*table, *env) error) (*page, error) {
	t, err := s.table(in.TableName)
	if err != nil {
		return nil, err
	}
	if in.IndexName != nil {
		return nil, validation("memdyn reads tables, not indexes")
	}
	p := &page{t: t, items: t.view(s.stale(in.ConsistentRead)), limit: -1, count: in.Select == "COUNT"}
	e := in.exprs.env()
	if keyCond != nil {
		if err := keyCond(t, e); err != nil {
			return nil, err
		}
	}
	if in.FilterExpression != nil {
		if p.filter, err = parseCondition(*in.FilterExpression, e); err != nil {
			return nil, validation("Invalid FilterExpression: %v", err)
		}
	}
	if in.ProjectionExpression != nil {
		if p.proj, err = parseProjection(*in.ProjectionExpression, e); err != nil {
			return nil, validation("Invalid ProjectionExpression: %v", err)
		}
	}
	if err := e.checkUsed(); err != nil {
		return nil, err
	}
	if in.Limit != nil {
		if *in.Limit < 1 {
			return nil, validation("Limit must be at least 1")
		}
		p.limit = *in.Limit
	}
	if in.ExclusiveStartKey != nil {
		if p.after, err = t.keyOf(in.ExclusiveStartKey, true); err != nil {
			return nil, validation("The provided starting key is invalid: %v", err)
		}
	}
	return p, nil
}

// collect reads entries from walk (which calls its visitor until it says
// stop) into one answer: at most Limit items read and 1 MB, as DynamoDB
// pages, with LastEvaluatedKey when it stopped early. The filter runs
// after the limit, as DynamoDB's does.
func (p *page) collect(walk func(visit func(*entry) bool)) map[string]any {
	items := []any{}
	scanned, size := 0, 0
	var last *entry
	walk(func(en *entry) bool {
		scanned++
		last = en
		if p.filter == nil && p.proj == nil {
			items = append(items, json.RawMessage(en.raw))
		} else if it := en.item(); p.filter == nil || p.filter(it) {
			items = append(items, project(it, p.proj))
		}
		size += len(en.raw)
		return !(p.limit > 0 && scanned >= p.limit) && size < 1<<20
	})
	out := map[string]any{"Count": len(items), "ScannedCount": scanned}
	if !p.count {
		out["Items"] = items
	}
	if last != nil && ((p.limit > 0 && scanned >= p.limit) || size >= 1<<20) {
		out["LastEvaluatedKey"] = p.t.entryKey(last)
	}
	return out
}

func (s *Server) query(body []byte) (any, error) {
	var in struct {
		readInput
		KeyConditionExpression *string
		ScanIndexForward       *bool
		KeyConditions          map[string]any
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if in.KeyConditions != nil || in.KeyConditionExpression == nil {
		return nil, validation("memdyn queries a table by KeyConditionExpression (no legacy KeyConditions)")
	}
	var kc *keyCond
	p, err := s.parsePage(in.readInput, func(t *table, e *env) (err error) {
		if kc, err = t.parseKeyCondition(*in.KeyConditionExpression, e); err != nil {
			return validation("%v", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	forward := in.ScanIndexForward == nil || *in.ScanIndexForward
	return p.collect(func(visit func(*entry) bool) { p.t.scanPartition(p.items, kc, forward, p.after, visit) }), nil
}

// scan reads a whole table in key order (partitions in the order of their
// canonical keys — DynamoDB's is a hash order; callers may rely on neither),
// one page at a time. Segments (parallel scans) are not implemented.
func (s *Server) scan(body []byte) (any, error) {
	var in struct {
		readInput
		Segment, TotalSegments *int
		ScanFilter             map[string]any
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if in.Segment != nil || in.TotalSegments != nil || in.ScanFilter != nil {
		return nil, validation("memdyn scans without segments or a legacy ScanFilter")
	}
	p, err := s.parsePage(in.readInput, nil)
	if err != nil {
		return nil, err
	}
	return p.collect(func(visit func(*entry) bool) {
		if p.after == nil {
			p.items.Ascend(visit)
			return
		}
		p.items.AscendGreaterOrEqual(p.after, func(en *entry) bool {
			return !less(p.after, en) && !less(en, p.after) || visit(en)
		})
	}), nil
}

func (s *Server) batchGet(body []byte) (any, error) {
	var in struct {
		RequestItems map[string]struct {
			exprs
			Keys                 []Item
			ProjectionExpression *string
			ConsistentRead       *bool
		}
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	n := 0
	resp := map[string][]Item{}
	for name, req := range in.RequestItems {
		t, err := s.table(name)
		if err != nil {
			return nil, err
		}
		proj, err := projection(req.ProjectionExpression, req.exprs)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		resp[name] = []Item{}
		items := t.view(s.stale(req.ConsistentRead))
		for _, k := range req.Keys {
			n++
			key, err := t.keyOf(k, true)
			if err != nil {
				return nil, validation("%v", err)
			}
			id := key.pk + "\x00" + canonical(t.sortValueOf(k))
			if seen[id] {
				return nil, validation("Provided list of item keys contains duplicates")
			}
			seen[id] = true
			if it := t.getFrom(items, key); it != nil {
				resp[name] = append(resp[name], project(it, proj))
			}
		}
	}
	if n == 0 || n > 100 {
		return nil, validation("BatchGetItem takes 1 to 100 keys, got %d", n)
	}
	return map[string]any{"Responses": resp, "UnprocessedKeys": map[string]any{}}, nil
}

func (t *table) sortValueOf(k Item) *Value {
	if t.rng == nil {
		return nil
	}
	return k[t.rng.name]
}

func (s *Server) batchWrite(body []byte) (any, error) {
	var in struct {
		RequestItems map[string][]struct {
			PutRequest    *struct{ Item Item }
			DeleteRequest *struct{ Key Item }
		}
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	var reqs []writeInput
	var kinds []string
	for name, rs := range in.RequestItems {
		for _, r := range rs {
			switch {
			case r.PutRequest != nil:
				reqs, kinds = append(reqs, writeInput{TableName: name, Item: r.PutRequest.Item}), append(kinds, "put")
			case r.DeleteRequest != nil:
				reqs, kinds = append(reqs, writeInput{TableName: name, Key: r.DeleteRequest.Key}), append(kinds, "delete")
			default:
				return nil, validation("a write request needs PutRequest or DeleteRequest")
			}
		}
	}
	writes, err := s.parseWrites(kinds, reqs, "Provided list of item keys contains duplicates")
	if err != nil {
		return nil, err
	}
	if len(writes) == 0 || len(writes) > 25 {
		return nil, validation("BatchWriteItem takes 1 to 25 requests, got %d", len(writes))
	}
	for _, w := range writes {
		if _, _, err := w.apply(); err != nil {
			return nil, err
		}
	}
	return map[string]any{"UnprocessedItems": map[string]any{}}, nil
}

// parseWrites parses the writes of one batch or transaction (kinds[i] of
// reqs[i]), refusing a second write to the same item with refusal.
func (s *Server) parseWrites(kinds []string, reqs []writeInput, refusal string) ([]*write, error) {
	writes := make([]*write, 0, len(reqs))
	seen := map[*table]map[string]bool{}
	for i, r := range reqs {
		w, err := s.parseWrite(kinds[i], r)
		if err != nil {
			return nil, err
		}
		if err := once(seen, w, refusal); err != nil {
			return nil, err
		}
		writes = append(writes, w)
	}
	return writes, nil
}

// once refuses a second write to the same item in one request.
func once(seen map[*table]map[string]bool, w *write, refusal string) error {
	if seen[w.t] == nil {
		seen[w.t] = map[string]bool{}
	}
	id := w.key.id()
	if seen[w.t][id] {
		return validation("%s", refusal)
	}
	seen[w.t][id] = true
	return nil
}

func (s *Server) transactWrite(body []byte) (any, error) {
	var in struct {
		TransactItems []struct {
			Put, Update, Delete, ConditionCheck *writeInput
		}
		ClientRequestToken *string
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if len(in.TransactItems) == 0 || len(in.TransactItems) > 100 {
		return nil, validation("TransactWriteItems takes 1 to 100 actions, got %d", len(in.TransactItems))
	}
	reqs, kinds := make([]writeInput, len(in.TransactItems)), make([]string, len(in.TransactItems))
	for i, ti := range in.TransactItems {
		switch {
		case ti.Put != nil:
			reqs[i], kinds[i] = *ti.Put, "put"
		case ti.Update != nil:
			reqs[i], kinds[i] = *ti.Update, "update"
		case ti.Delete != nil:
			reqs[i], kinds[i] = *ti.Delete, "delete"
		case ti.ConditionCheck != nil:
			reqs[i], kinds[i] = *ti.ConditionCheck, "check"
		default:
			return nil, validation("a transaction action needs Put, Update, Delete or ConditionCheck")
		}
	}
	writes, err := s.parseWrites(kinds, reqs, "Transaction request cannot include multiple operations on one item")
	if err != nil {
		return nil, err
	}
	reasons := make([]map[string]any, len(writes))
	failed := false
	for i, w := range writes {
		reasons[i] = map[string]any{"Code": "None"}
		if old, ok := w.check(); !ok {
			failed = true
			reasons[i] = map[string]any{"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"}
			if w.rvOnFail == "ALL_OLD" && old != nil {
				reasons[i]["Item"] = old
			}
		}
	}
	if failed {
		codes := make([]string, len(reasons))
		for i, r := range reasons {
			codes[i] = r["Code"].(string)
		}
		return nil, &apiError{typ: "TransactionCanceledException",
			msg:   "Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]",
			extra: map[string]any{"CancellationReasons": reasons}}
	}
	// Updates may fail on types (ADD to a string): check them all on
	// copies before changing anything, so the transaction stays atomic.
	for _, w := range writes {
		if w.kind == "update" {
			probe := w.t.get(w.key).clone()
			if probe == nil {
				probe = Item{}
			}
			if err := w.upd(probe); err != nil {
				return nil, validation("%v", err)
			}
		}
	}
	for _, w := range writes {
		if w.kind != "check" {
			if _, _, err := w.apply(); err != nil {
				return nil, err
			}
		}
	}
	return map[string]any{}, nil
}

func (s *Server) transactGet(body []byte) (any, error) {
	var in struct {
		TransactItems []struct {
			Get *struct {
				exprs
				TableName            string
				Key                  Item
				ProjectionExpression *string
			}
		}
	}
	if err := decode(body, &in); err != nil {
		return nil, err
	}
	if len(in.TransactItems) == 0 || len(in.TransactItems) > 100 {
		return nil, validation("TransactGetItems takes 1 to 100 actions")
	}
	var out []map[string]any
	for _, ti := range in.TransactItems {
		if ti.Get == nil {
			return nil, validation("a TransactGetItems action needs Get")
		}
		t, err := s.table(ti.Get.TableName)
		if err != nil {
			return nil, err
		}
		k, err := t.keyOf(ti.Get.Key, true)
		if err != nil {
			return nil, validation("%v", err)
		}
		proj, err := projection(ti.Get.ProjectionExpression, ti.Get.exprs)
		if err != nil {
			return nil, err
		}
		r := map[string]any{}
		if it := t.get(k); it != nil {
			r["Item"] = project(it, proj)
		}
		out = append(out, r)
	}
	return map[string]any{"Responses": out}, nil
}
