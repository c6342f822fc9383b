package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
)

// Where the client commands look for the stack by default: signet local's
// addresses.
const (
	defaultWebSocketURL = "ws://127.0.0.1:3001/"
	defaultAPIURL       = "http://127.0.0.1:3000"
)

// clientFlags are the flags every client command shares.
type clientFlags struct {
	user, device, url, token, secret, data string
	// timeout bounds the connect (default 15 s; send sets its --timeout).
	timeout time.Duration
}

// dataHome is where device stores live by default: $XDG_DATA_HOME/signet,
// else ~/.local/share/signet, else ./.signet.
func dataHome() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "signet")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "signet")
	}
	return ".signet"
}

// register adds the flags every client command shares to fs.
func (f *clientFlags) register(fs *flag.FlagSet, defaultDevice string) {
	fs.StringVar(&f.user, "user", "", "your user id (required)")
	fs.StringVar(&f.device, "device", defaultDevice, "this device's id: each device has its own cursor and outbox")
	fs.StringVar(&f.url, "url", envOr("SIGNET_URL", defaultWebSocketURL), "WebSocket URL: signet local's, or a deployed wss://…/<stage> (env SIGNET_URL)")
	fs.StringVar(&f.token, "token", os.Getenv("SIGNET_TOKEN"), "JWT to connect with (env SIGNET_TOKEN); default: mint one with --secret")
	fs.StringVar(&f.secret, "secret", envOr(config.EnvJWTSecret, devstack.DefaultSecret), "HS256 secret for minting a token (env SIGNET_JWT_SECRET; default: the local stack's)")
	fs.StringVar(&f.data, "data", dataHome(), "data directory; the device store is <data>/<user>/<device>/client.db")
}

// parse parses a client command's flags (parse) and checks them (check).
func (f *clientFlags) parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	return f.check()
}

// check refuses a missing or malformed --user or --device, and a --token
// of another user or device (the server would act as the token says,
// while this device's store is --user's and --device's).
func (f *clientFlags) check() error {
	if !im.UserID(f.user).Valid() {
		return fmt.Errorf("%w: --user is required (1-64 characters of [A-Za-z0-9._@-])", errUsage)
	}
	if !im.DeviceID(f.device).Valid() {
		return fmt.Errorf("%w: --device must be 1-64 characters of [A-Za-z0-9._@-]", errUsage)
	}
	if f.token == "" {
		return nil
	}
	sub, did, ok := tokenSubject(f.token)
	switch {
	case !ok:
		return fmt.Errorf("%w: --token is not a JWT (header.payload.signature)", errUsage)
	case sub != f.user:
		return fmt.Errorf("%w: --token is %s's, not %s's (--user): the server would act as %s; pass --user %s or a token of %s", errUsage, sub, f.user, sub, sub, f.user)
	case did != "" && did != f.device:
		return fmt.Errorf("%w: --token is for device %s, not %s (--device): pass --device %s", errUsage, did, f.device, did)
	}
	return nil
}

// tokenSubject reads a JWT's user ("sub") and device ("did") without
// verifying it: the server verifies; this only catches a token meant for
// someone else.
func tokenSubject(token string) (sub, did string, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", "", false
	}
	var c struct {
		Sub string `json:"sub"`
		Did string `json:"did"`
	}
	if json.Unmarshal(payload, &c) != nil {
		return "", "", false
	}
	return c.Sub, c.Did, true
}

// dir is the device's data directory.
func (f *clientFlags) dir() string { return filepath.Join(f.data, f.user, f.device) }

// storePath is the device's store: its messages, cursor and outbox.
func (f *clientFlags) storePath() string { return filepath.Join(f.dir(), "client.db") }

// dial connects the user's device client.
func (f *clientFlags) dial(ctx context.Context, mutate func(*client.Options)) (*client.Client, error) {
	opts := client.Options{
		URL:    f.url,
		Device: f.device,
		Path:   f.storePath(),
		Token: func(context.Context) (string, error) {
			if f.token != "" {
				return f.token, nil
			}
			return auth.Mint([]byte(f.secret), im.UserID(f.user), im.DeviceID(f.device), time.Now(), time.Hour)
		},
	}
	if mutate != nil {
		mutate(&opts)
	}
	timeout := f.timeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := client.Dial(dctx, opts)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("could not connect to %s within %s (is `signet local` running?)", f.url, timeout)
	}
	return c, err
}

const clientHelpTail = `
Each user/device keeps its messages, cursor and outbox in
<data>/<user>/<device>/client.db (default data directory: %s).
`
