package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/signet-im/signet/shared/devstack"
)

// stringList is a repeatable string flag.
type stringList []string

// String and Set make stringList a repeatable flag.
func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// apiFlags registers --api and --key, the HTTP API base URL and the key to
// call it with (environment, then the local stack's defaults).
func apiFlags(fs *flag.FlagSet) (url, key *string) {
	url = fs.String("api", envOr("SIGNET_API_URL", defaultAPIURL), "HTTP API base URL (env SIGNET_API_URL)")
	key = fs.String("key", envOr("SIGNET_ADMIN_KEY", devstack.DefaultAdminKey), "admin key, or an app key for its own messages (env SIGNET_ADMIN_KEY; default: the local stack's)")
	return url, key
}

// adminFlags registers --api and --key for the admin's commands.
func adminFlags(fs *flag.FlagSet) (url, key *string) {
	url = fs.String("api", envOr("SIGNET_API_URL", defaultAPIURL), "HTTP API base URL (env SIGNET_API_URL)")
	key = fs.String("key", envOr("SIGNET_ADMIN_KEY", devstack.DefaultAdminKey), "the admin key (env SIGNET_ADMIN_KEY; default: the local stack's)")
	return url, key
}

// printApps prints GET /v1/apps as a table.
func printApps(w io.Writer, raw []byte) error {
	var list struct {
		Apps []struct {
			AppID         string   `json:"appId"`
			AllowUsers    []string `json:"allowUsers"`
			AllowGroups   []string `json:"allowGroups"`
			RatePerMinute int      `json:"ratePerMinute"`
			CreatedAt     string   `json:"createdAt"`
			Revoked       bool     `json:"revoked"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("GET /v1/apps: %w", err)
	}
	if len(list.Apps) == 0 {
		fmt.Fprintln(w, "No apps yet: signet apps create --name <app> --allow-user <user>")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "APP\tSTATE\tUSERS\tGROUPS\tRATE/MIN\tCREATED")
	for _, a := range list.Apps {
		state := "active"
		if a.Revoked {
			state = "revoked"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", a.AppID, state, strings.Join(a.AllowUsers, ","), strings.Join(a.AllowGroups, ","), a.RatePerMinute, a.CreatedAt)
	}
	return tw.Flush()
}

// apiCall sends a JSON request to the HTTP API and decodes the answer.
func apiCall(ctx context.Context, method, url, key string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w (is `signet local` running?)", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error.Code != "" {
			return fmt.Errorf("%s (%d %s)", e.Error.Message, resp.StatusCode, e.Error.Code)
		}
		return fmt.Errorf("%s %s: HTTP %d", method, url, resp.StatusCode)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// runApps is `signet apps`: create an app that may post alerts (its key is
// printed once) or revoke one, through the HTTP API with the admin key.
func runApps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func(w io.Writer) {
		fmt.Fprint(w, `Usage:
  signet apps create --name <app> [--allow-user U]... [--allow-group G]... [--rate N]
  signet apps list [--json]
  signet apps rotate-key <app>
  signet apps revoke <app>
  signet apps webhook <app> <https-url> | --sqs <queue-url> | --remove
  signet apps events <app> [--state undelivered|pending|dead|delivered|all] [--json]
  signet apps retry <app> [eventId]...

Manages the enterprise apps that post alerts over HTTPS (admin key needed;
webhook, events and retry take the app's own key too). create prints the
app's key once; only its hash is stored. --allow-user '*' lets the app
message every user. rotate-key prints a new key once; the old one stops
working at once. A revoked app's name may be created again. webhook sends
the app's status callbacks (delivered, read, answered, escalated, expired)
to the URL and prints their signing secret once; events lists them with
how their delivery stands; retry delivers dead ones again (all, or those
named). See docs/webhooks.md.
Run 'signet apps <command> --help' for flags.
`)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("signet apps create", flag.ContinueOnError)
		name := fs.String("name", "", "app id, e.g. monitoring (required)")
		var users, groups stringList
		fs.Var(&users, "allow-user", "a user the app may message (repeatable; '*' for all)")
		fs.Var(&groups, "allow-group", "a group id (without g:) whose members the app may message with {\"group\":…} (repeatable; '*' for all)")
		rate := fs.Int("rate", 600, "posts per minute")
		url, key := adminFlags(fs)
		if err := parse(fs, args[1:], stderr); err != nil {
			return err
		}
		if *name == "" {
			return fmt.Errorf("%w: --name is required", errUsage)
		}
		var out struct{ AppID, Key string }
		body := map[string]any{"name": *name, "allowUsers": append([]string{}, users...), "allowGroups": append([]string{}, groups...), "ratePerMinute": *rate}
		if err := apiCall(ctx, "POST", *url+"/v1/apps", *key, body, &out); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "App %s created. Its key is shown only now; store it safely:\n", out.AppID)
		fmt.Fprintln(stdout, out.Key)
		return nil
	case "revoke", "rotate-key":
		fs := flag.NewFlagSet("signet apps "+args[0], flag.ContinueOnError)
		url, key := adminFlags(fs)
		flags, pos := interleaved(fs, args[1:])
		if err := parse(fs, flags, stderr); err != nil {
			return err
		}
		if len(pos) != 1 {
			return fmt.Errorf("%w: give one app id", errUsage)
		}
		if args[0] == "revoke" {
			if err := apiCall(ctx, "DELETE", *url+"/v1/apps/"+pos[0], *key, nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "App %s revoked: its key no longer works.\n", pos[0])
			return nil
		}
		var out struct{ AppID, Key string }
		if err := apiCall(ctx, "POST", *url+"/v1/apps/"+pos[0]+"/key", *key, nil, &out); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "App %s has a new key; the old one no longer works. It is shown only now; store it safely:\n", out.AppID)
		fmt.Fprintln(stdout, out.Key)
		return nil
	case "webhook":
		fs := flag.NewFlagSet("signet apps webhook", flag.ContinueOnError)
		url, key := apiFlags(fs)
		remove := fs.Bool("remove", false, "stop sending status callbacks")
		queue := fs.String("sqs", "", "send the callbacks to this SQS queue URL (a queue named signet-callbacks-…) instead of a webhook")
		flags, pos := interleaved(fs, args[1:])
		if err := parse(fs, flags, stderr); err != nil {
			return err
		}
		if len(pos) != 2 && !((*remove || *queue != "") && len(pos) == 1) {
			return fmt.Errorf("%w: give an app id and a URL, an app id and --sqs <queue url>, or an app id and --remove", errUsage)
		}
		if *remove {
			if err := apiCall(ctx, "DELETE", *url+"/v1/apps/"+pos[0]+"/webhook", *key, nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "App %s sends no more status callbacks; recorded events stay listed.\n", pos[0])
			return nil
		}
		var out struct {
			AppID, URL, Secret string
			SQSQueueURL        string `json:"sqsQueueUrl"`
		}
		body := map[string]string{"sqsQueueUrl": *queue}
		if *queue == "" {
			body = map[string]string{"url": pos[1]}
		}
		if err := apiCall(ctx, "PUT", *url+"/v1/apps/"+pos[0]+"/webhook", *key, body, &out); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "App %s sends its status callbacks to %s, signed with this secret (shown only now; store it with the receiver):\n", out.AppID, out.URL+out.SQSQueueURL)
		fmt.Fprintln(stdout, out.Secret)
		return nil
	case "events":
		fs := flag.NewFlagSet("signet apps events", flag.ContinueOnError)
		url, key := apiFlags(fs)
		state := fs.String("state", "undelivered", "undelivered (pending and dead), pending, dead, delivered or all")
		asJSON := fs.Bool("json", false, "print the events as JSON lines")
		flags, pos := interleaved(fs, args[1:])
		if err := parse(fs, flags, stderr); err != nil {
			return err
		}
		if len(pos) != 1 {
			return fmt.Errorf("%w: give one app id", errUsage)
		}
		return printEvents(ctx, stdout, *url+"/v1/apps/"+pos[0]+"/events?state="+*state, *key, *asJSON)
	case "retry":
		fs := flag.NewFlagSet("signet apps retry", flag.ContinueOnError)
		url, key := apiFlags(fs)
		flags, pos := interleaved(fs, args[1:])
		if err := parse(fs, flags, stderr); err != nil {
			return err
		}
		if len(pos) < 1 {
			return fmt.Errorf("%w: give an app id (and event ids, or none for every dead event)", errUsage)
		}
		var out struct {
			Retried []string `json:"retried"`
		}
		if err := apiCall(ctx, "POST", *url+"/v1/apps/"+pos[0]+"/events/retry", *key, map[string]any{"eventIds": append([]string{}, pos[1:]...)}, &out); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d dead events will be delivered again.\n", len(out.Retried))
		return nil
	case "list":
		fs := flag.NewFlagSet("signet apps list", flag.ContinueOnError)
		url, key := adminFlags(fs)
		asJSON := fs.Bool("json", false, "print the API's JSON answer")
		if err := parse(fs, args[1:], stderr); err != nil {
			return err
		}
		var out json.RawMessage
		if err := apiCall(ctx, "GET", *url+"/v1/apps", *key, nil, &out); err != nil {
			return err
		}
		if *asJSON {
			fmt.Fprintln(stdout, string(out))
			return nil
		}
		return printApps(stdout, out)
	}
	return fmt.Errorf("%w: unknown apps command %q (create, list, rotate-key, revoke, webhook, events, retry)", errUsage, args[0])
}

// callbackEvent mirrors one event of GET /v1/apps/{appId}/events.
type callbackEvent struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	MessageID string `json:"messageId"`
	UserID    string `json:"userId"`
	At        string `json:"at"`
	Answer    string `json:"answer"`
	Delivery  struct {
		State         string `json:"state"`
		Attempts      int    `json:"attempts"`
		NextAttemptAt string `json:"nextAttemptAt"`
		LastError     string `json:"lastError"`
	} `json:"delivery"`
}

// printEvents prints every page of the events at url: a table, or the
// API's events as JSON lines.
func printEvents(ctx context.Context, w io.Writer, url, key string, asJSON bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(tw, "EVENT\tTYPE\tUSER\tAT\tDELIVERY\tTRIES\tLAST ERROR")
	}
	after, n := "", 0
	for {
		var page struct {
			Events []json.RawMessage `json:"events"`
			Next   string            `json:"next"`
		}
		u := url
		if after != "" {
			u += "&after=" + after
		}
		if err := apiCall(ctx, "GET", u, key, nil, &page); err != nil {
			return err
		}
		for _, raw := range page.Events {
			n++
			if asJSON {
				fmt.Fprintln(w, string(raw))
				continue
			}
			var e callbackEvent
			if err := json.Unmarshal(raw, &e); err != nil {
				return err
			}
			state := e.Delivery.State
			if e.Delivery.NextAttemptAt != "" {
				state += " (next " + e.Delivery.NextAttemptAt + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.ID, e.Type, e.UserID, e.At, state, e.Delivery.Attempts, e.Delivery.LastError)
		}
		if after = page.Next; after == "" {
			break
		}
	}
	if asJSON {
		return nil
	}
	if n == 0 {
		fmt.Fprintln(w, "No events.")
		return nil
	}
	return tw.Flush()
}

// traceEvent mirrors one event of GET /v1/messages/{id}/trace.
type traceEvent struct {
	Type         string `json:"type"`
	At           string `json:"at"`
	Function     string `json:"function"`
	RequestID    string `json:"requestId"`
	UserID       string `json:"userId"`
	DeviceID     string `json:"deviceId"`
	ConnectionID string `json:"connectionId"`
	Seq          int64  `json:"seq"`
	Attempt      int    `json:"attempt"`
	DelayMs      int64  `json:"delayMs"`
	Detail       string `json:"detail"`
}

// runTrace is `signet trace <messageId>`: a message's trace from the HTTP
// API, each step with when, where and on which device.
func runTrace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signet trace", flag.ContinueOnError)
	url, key := apiFlags(fs)
	asJSON := fs.Bool("json", false, "print the raw events as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: signet trace <messageId> [flags]

Prints a message's trace: every step of its path (created, stored, inboxed,
pushed, push_failed, redelivery_scheduled, acked, read, awaiting_pull) with
its time, the function and request that recorded it, and the user, device,
connection, inbox seq and attempt it concerns.

A 1:1 or read-diffused group message sent as expected is traced in full for
one in TraceSample (template parameter, default 50); for the others the
steps are derived from what is stored — the conversation log, the inboxes
and the devices' ack ranges — and say so in their detail, without
connection or request ids. For a message of a read-diffused group, the
members it is due to, the devices that have it (their cursors in the group)
and the members who read it are always derived. Failures, retries and redeliveries are always
recorded.

Flags:
`)
		fs.PrintDefaults()
	}
	flags, pos := interleaved(fs, args)
	if err := parse(fs, flags, stderr); err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: give one messageId", errUsage)
	}
	var out struct {
		MessageID string       `json:"messageId"`
		Events    []traceEvent `json:"events"`
	}
	if err := apiCall(ctx, "GET", *url+"/v1/messages/"+neturl.PathEscape(pos[0])+"/trace", *key, nil, &out); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	fmt.Fprintf(stdout, "Trace of %s (%d events)\n", out.MessageID, len(out.Events))
	var first time.Time
	for _, e := range out.Events {
		at, _ := time.Parse(time.RFC3339Nano, e.At)
		if first.IsZero() {
			first = at
		}
		var who []string
		if e.UserID != "" {
			who = append(who, "user "+e.UserID)
		}
		if e.DeviceID != "" {
			who = append(who, "device "+e.DeviceID)
		}
		if e.Seq > 0 {
			who = append(who, fmt.Sprintf("seq %d", e.Seq))
		}
		if e.ConnectionID != "" {
			who = append(who, "conn "+e.ConnectionID)
		}
		if e.Attempt > 0 {
			who = append(who, fmt.Sprintf("attempt %d", e.Attempt))
		}
		if e.DelayMs > 0 {
			who = append(who, fmt.Sprintf("in %s", time.Duration(e.DelayMs)*time.Millisecond))
		}
		if e.Detail != "" {
			who = append(who, e.Detail)
		}
		fmt.Fprintf(stdout, "  %s  +%-8s %-21s %-9s %s\n", at.Local().Format("15:04:05.000"), at.Sub(first).Round(time.Millisecond), e.Type, e.Function, strings.Join(who, ", "))
	}
	return nil
}
