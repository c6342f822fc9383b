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

func number(v float64) string {
	switch {
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	case v >= 1:
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
