package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/signet-im/signet/shared/auth"
	"github.com/signet-im/signet/shared/config"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/im"
)

// runToken is `signet token`: print a development token for a user.
func runToken(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signet token", flag.ContinueOnError)
	device := fs.String("device", "", "device id to put in the token's did claim (default: none; the client may pass ?deviceId=)")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the token is valid (the server refuses tokens valid longer than SIGNET_MAX_TOKEN_LIFETIME, default 24h)")
	secret := fs.String("secret", envOr(config.EnvJWTSecret, devstack.DefaultSecret), "HS256 secret (env SIGNET_JWT_SECRET; default: the local stack's)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: signet token <userId> [flags]\n\nPrints a JWT (HS256) for connecting as userId: ws://127.0.0.1:3001/?token=<token>\n\nFlags:\n")
		fs.PrintDefaults()
	}
	flags, pos := interleaved(fs, args)
	if err := parse(fs, flags, stderr); err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: give one userId", errUsage)
	}
	tok, err := auth.Mint([]byte(*secret), im.UserID(pos[0]), im.DeviceID(*device), time.Now(), *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

// loadTimings reads redelivery and sync settings from the environment.
func loadTimings() (config.Config, error) { return config.Load(envLookup) }
