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
	LogBytes       int64   `json:"logBytes"`

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
	add("API Gateway messages", float64(u.WebSocketMessages), p.WebSocketMessage)
	add("API Gateway connection minutes", u.ConnectionMinutes, p.ConnectionMinute)
	add("Lambda requests", float64(u.LambdaRequests), p.LambdaRequest)
	add("Lambda GB-seconds", u.LambdaGBSeconds, p.LambdaGBSecond)
	add("DynamoDB write units", u.WriteUnits, p.WriteUnit)
	add("DynamoDB read units", u.ReadUnits, p.ReadUnit)
	add("SQS requests", float64(u.SQSRequests), p.SQSRequest)
	add("DynamoDB storage + PITR (GB-months)", u.StoredGBMonths, p.StorageGBMonth+p.PITRGBMonth)
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
