package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	neturl "net/url"
	"text/tabwriter"
	"time"
)

// runDevices is `signet devices`: list a user's devices, or forget one to
// free its place under the device limit, through the HTTP API with the
// admin key.
func runDevices(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func(w io.Writer) {
		fmt.Fprint(w, `Usage:
  signet devices list --user <userId> [--json]
  signet devices forget --user <userId> --device <deviceId>

A user may have at most SIGNET_MAX_DEVICES devices (template parameter
MaxDevicesPerUser, default 20): a connection with a device id the user has
not used before is refused beyond it (HTTP 409). list shows the user's
devices: how far each acked, when, and its open connections. forget
removes a device that is gone (a lost phone, a wiped browser), freeing
its place; it is refused while the device is connected, or while it has
acked further than every other device of the user (the user's delivered
receipts rest on it: forget it once another device has caught up). What
it acked stays in the trace (in read-diffused groups also in the user's
delivered receipts); a device that connects later with the same id is a
new device. It is woken no more. The admin key is needed.
Run 'signet devices <command> --help' for flags.
`)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	fs := flag.NewFlagSet("signet devices "+args[0], flag.ContinueOnError)
	user := fs.String("user", "", "the user (required)")
	url, key := adminFlags(fs)
	switch args[0] {
	case "list":
		asJSON := fs.Bool("json", false, "print the API's JSON answer")
		if err := parse(fs, args[1:], stderr); err != nil {
			return err
		}
		if *user == "" {
			return fmt.Errorf("%w: --user is required", errUsage)
		}
		var out json.RawMessage
		if err := apiCall(ctx, "GET", *url+"/v1/users/"+neturl.PathEscape(*user)+"/devices", *key, nil, &out); err != nil {
			return err
		}
		if *asJSON {
			fmt.Fprintln(stdout, string(out))
			return nil
		}
		return printDevices(stdout, out)
	case "forget":
		device := fs.String("device", "", "the device to forget (required)")
		if err := parse(fs, args[1:], stderr); err != nil {
			return err
		}
		if *user == "" || *device == "" {
			return fmt.Errorf("%w: --user and --device are required", errUsage)
		}
		path := "/v1/users/" + neturl.PathEscape(*user) + "/devices/" + neturl.PathEscape(*device)
		if err := apiCall(ctx, "DELETE", *url+path, *key, nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Device %s of %s forgotten: its place under the device limit is free.\n", *device, *user)
		return nil
	}
	usage(stderr)
	return fmt.Errorf("%w: unknown devices command %q", errUsage, args[0])
}

// printDevices prints GET /v1/users/{userId}/devices as a table.
func printDevices(w io.Writer, raw []byte) error {
	var list struct {
		UserID     string `json:"userId"`
		MaxDevices int    `json:"maxDevices"`
		Devices    []struct {
			DeviceID     string     `json:"deviceId"`
			Acked        int64      `json:"acked"`
			AckedAt      *time.Time `json:"ackedAt"`
			RegisteredAt *time.Time `json:"registeredAt"`
			Connections  int        `json:"connections"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("GET /v1/users/{userId}/devices: %w", err)
	}
	fmt.Fprintf(w, "%s has %d of at most %d devices.\n", list.UserID, len(list.Devices), list.MaxDevices)
	if len(list.Devices) == 0 {
		return nil
	}
	when := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tACKED\tACKED AT\tFIRST CONNECTED\tCONNECTIONS")
	for _, d := range list.Devices {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\n", d.DeviceID, d.Acked, when(d.AckedAt), when(d.RegisteredAt), d.Connections)
	}
	return tw.Flush()
}
