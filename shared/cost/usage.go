package cost

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Usage is what one scenario was metered: billed units in total, and what
// they were spent on.
type Usage struct {
	Scenario  string `json:"scenario"`
	Delivered int    `json:"delivered"` // units delivered (what the costs are divided by)
	Unit      string `json:"unit"`      // what one of them is ("message" when empty)

	WebSocketMessages int64   `json:"webSocketMessages"`
	ConnectionMinutes float64 `json:"connectionMinutes"`
	LambdaRequests    int64   `json:"lambdaRequests"`
	LambdaGBSeconds   float64 `json:"lambdaGBSeconds"`
	WriteUnits        float64 `json:"writeUnits"`
	ReadUnits         float64 `json:"readUnits"`
	SQSRequests       int64   `json:"sqsRequests"`
	// StoredGBMonths is bytes put times each table's retention.
	StoredGBMonths float64 `json:"storedGBMonths"`
	// The parts of WriteUnits, ReadUnits and StoredGBMonths spent on
	// Standard-IA tables (the conversation log), priced at that class.
	WriteUnitsIA     float64 `json:"writeUnitsIA,omitempty"`
	ReadUnitsIA      float64 `json:"readUnitsIA,omitempty"`
	StoredGBMonthsIA float64 `json:"storedGBMonthsIA,omitempty"`
	LogBytes         int64   `json:"logBytes"`

	// Invocations by function, for the breakdown.
	Invocations map[string]int64 `json:"invocations,omitempty"`
	// Calls are the AWS calls by "Service.Operation"; WriteUnitsByCall
	// and ReadUnitsByCall split the DynamoDB units by "Operation Table"
	// (the template's table ids): where a message's units go.
	Calls            map[string]float64 `json:"calls,omitempty"`
	WriteUnitsByCall map[string]float64 `json:"writeUnitsByCall,omitempty"`
	ReadUnitsByCall  map[string]float64 `json:"readUnitsByCall,omitempty"`
}

// Scale multiplies every count of u by f (a short run scaled to a day).
func (u *Usage) Scale(f float64) {
	u.WebSocketMessages = int64(float64(u.WebSocketMessages) * f)
	u.LambdaRequests = int64(float64(u.LambdaRequests) * f)
	u.LambdaGBSeconds *= f
	u.WriteUnits *= f
	u.ReadUnits *= f
	u.SQSRequests = int64(float64(u.SQSRequests) * f)
	u.StoredGBMonths *= f
	u.WriteUnitsIA *= f
	u.ReadUnitsIA *= f
	u.StoredGBMonthsIA *= f
	u.LogBytes = int64(float64(u.LogBytes) * f)
	for fn, n := range u.Invocations {
		u.Invocations[fn] = int64(float64(n) * f)
	}
	for _, m := range []map[string]float64{u.Calls, u.WriteUnitsByCall, u.ReadUnitsByCall} {
		for k := range m {
			m[k] *= f
		}
	}
}

// Line is one priced component.
type Line struct {
	Component  string  `json:"component"`
	Units      float64 `json:"units"`   // total
	PerMessage float64 `json:"perUnit"` // per delivered unit (a message, unless Usage.Unit says otherwise)
	PerMillion float64 `json:"usdPerMillion"`
}

// Priced is a scenario's usage at prices.
type Priced struct {
	Usage
	Lines      []Line  `json:"lines"`
	PerMillion float64 `json:"usdPerMillion"` // all components, per million delivered messages
}

// Price prices u at p.
func (u Usage) Price(p Prices) Priced {
	out := Priced{Usage: u}
	per := float64(max(u.Delivered, 1))
	add := func(component string, units, price float64) {
		l := Line{Component: component, Units: units, PerMessage: units / per, PerMillion: units / per * price * 1e6}
		out.Lines = append(out.Lines, l)
		out.PerMillion += l.PerMillion
	}
	// A line's units include those of Standard-IA tables (a per-message
	// goal counts every unit); those are priced at their class's price.
	addIA := func(component string, units, ia, price, iaPrice float64) {
		add(component, units, 0)
		l := &out.Lines[len(out.Lines)-1]
		l.PerMillion = ((units-ia)*price + ia*iaPrice) / per * 1e6
		out.PerMillion += l.PerMillion
	}
	add("API Gateway messages", float64(u.WebSocketMessages), p.WebSocketMessage)
	add("API Gateway connection minutes", u.ConnectionMinutes, p.ConnectionMinute)
	add("Lambda requests", float64(u.LambdaRequests), p.LambdaRequest)
	add("Lambda GB-seconds", u.LambdaGBSeconds, p.LambdaGBSecond)
	addIA("DynamoDB write units", u.WriteUnits, u.WriteUnitsIA, p.WriteUnit, p.WriteUnitIA)
	addIA("DynamoDB read units", u.ReadUnits, u.ReadUnitsIA, p.ReadUnit, p.ReadUnitIA)
	add("SQS requests", float64(u.SQSRequests), p.SQSRequest)
	addIA("DynamoDB storage + PITR (GB-months)", u.StoredGBMonths, u.StoredGBMonthsIA, p.StorageGBMonth+p.PITRGBMonth, p.StorageGBMonthIA+p.PITRGBMonth)
	add("CloudWatch Logs (GB)", float64(u.LogBytes)/1e9, p.LogsGB)
	return out
}

// UnitName is what one delivered unit is.
func (u Usage) UnitName() string {
	if u.Unit == "" {
		return "message"
	}
	return u.Unit
}

// Print writes the priced usage as a table: a line per component.
func (pr Priced) Print(w io.Writer) {
	unit := pr.UnitName()
	fmt.Fprintf(w, "%s: %d × %s\n", pr.Scenario, pr.Delivered, unit)
	fmt.Fprintf(w, "  %-38s %12s %12s %12s\n", "component", "units", "per "+unit, "$ per 1M")
	for _, l := range pr.Lines {
		fmt.Fprintf(w, "  %-38s %12s %12s %12.2f\n", l.Component, number(l.Units), number(l.PerMessage), l.PerMillion)
	}
	fmt.Fprintf(w, "  %-38s %12s %12s %12.2f   ($%.6f per %s)\n", "total", "", "", pr.PerMillion, pr.PerMillion/1e6, unit)
	if len(pr.Invocations) > 0 {
		var parts []string
		for _, fn := range sortedKeys(pr.Invocations) {
			parts = append(parts, fmt.Sprintf("%s %.2f", strings.TrimSuffix(fn, "Function"), float64(pr.Invocations[fn])/float64(max(pr.Delivered, 1))))
		}
		fmt.Fprintf(w, "  invocations per %s: %s\n", unit, strings.Join(parts, ", "))
	}
	if pr.WriteUnitsIA+pr.ReadUnitsIA+pr.StoredGBMonthsIA > 0 {
		per := float64(max(pr.Delivered, 1))
		fmt.Fprintf(w, "  of which on Standard-IA tables (the conversation log) per %s: %.2f write units, %.2f read units, %.3g GB-months\n",
			unit, pr.WriteUnitsIA/per, pr.ReadUnitsIA/per, pr.StoredGBMonthsIA/per)
	}
}

// PrintCalls writes what the usage's AWS calls were, per delivered unit:
// each operation's calls, and the DynamoDB write and read units by
// operation and table, the largest first.
func (pr Priced) PrintCalls(w io.Writer) {
	unit := pr.UnitName()
	per := float64(max(pr.Delivered, 1))
	fmt.Fprintf(w, "  AWS calls per %s:\n", unit)
	for _, k := range largestFirst(pr.Calls) {
		fmt.Fprintf(w, "    %-52s %8.2f\n", k, pr.Calls[k]/per)
	}
	for _, part := range []struct {
		name string
		m    map[string]float64
	}{{"DynamoDB write units", pr.WriteUnitsByCall}, {"DynamoDB read units", pr.ReadUnitsByCall}} {
		fmt.Fprintf(w, "  %s per %s, by operation and table:\n", part.name, unit)
		for _, k := range largestFirst(part.m) {
			fmt.Fprintf(w, "    %-52s %8.2f\n", k, part.m[k]/per)
		}
	}
}

// largestFirst returns m's keys by value, largest first (then by name).
func largestFirst(m map[string]float64) []string {
	keys := sortedKeys(m)
	slices.SortStableFunc(keys, func(a, b string) int {
		switch {
		case m[a] > m[b]:
			return -1
		case m[a] < m[b]:
			return 1
		}
		return 0
	})
	return keys
}

func number(v float64) string {
	switch {
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	case v >= 1:
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func sortedKeys[V int64 | float64](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
