// Command signet is Signet's developer CLI: run the local stack, mint dev
// tokens, provision tables and queues at an endpoint.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands are signet's subcommands, in the order --help lists them.
var commands = []command{
	{"local", "run the whole backend locally (WebSocket API on 127.0.0.1:3001)", runLocal},
	{"token", "print a dev token for a user: signet token <userId> [--device D]", runToken},
	{"provision", "create the template's tables and queues at an endpoint", runProvision},
	{"chat", "interactive terminal chat: signet chat --user alice [--device laptop]", runChat},
	{"send", "send one message: signet send --user alice --to bob \"text\"", runSend},
	{"tail", "print a user's messages as JSON lines: signet tail --user bob [--count N]", runTail},
	{"apps", "manage apps that post alerts: signet apps create --name monitoring --allow-user bob", runApps},
	{"devices", "list a user's devices, or forget one to free its place: signet devices list --user bob", runDevices},
	{"trace", "print a message's path to each device: signet trace <messageId>", runTrace},
	{"netem", "weak-network proxy for any client: signet netem --profile subway (or --loss 0.2 --delay 200ms±100ms)", runNetem},
	{"chaos", "seeded chaos run of the whole system, reconciled at the end: signet chaos --seed 7 --messages 2000", runChaos},
	{"reconcile", "compare a user's server inbox with a device journal: signet reconcile --user bob --journal bob.jsonl", runReconcile},
	{"bench", "price a delivered message at AWS list prices through the local stack: signet bench cost", runBench},
}

// usage prints the commands.
func usage(w io.Writer) {
	fmt.Fprintln(w, "Signet - serverless enterprise messaging with confirmable delivery.")
	fmt.Fprintln(w, "\nUsage: signet <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'signet <command> --help' for a command's flags, 'signet --version' for the build.")
}

// version describes this build from the information Go records in every
// binary: the module version (a tag, or "(devel)"), the commit and its
// time when built from a checkout (and whether it had changes), and Go's.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "signet (no build information)"
	}
	out := "signet " + bi.Main.Version
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		out += " " + rev[:min(12, len(rev))]
		if settings["vcs.modified"] == "true" {
			out += "+changes"
		}
		if t := settings["vcs.time"]; t != "" {
			out += " " + t
		}
	}
	return out + " " + bi.GoVersion
}

// main runs the command line and exits with its status.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run runs one command line: 0 on success, 1 when the command failed, 2
// for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "version") {
		fmt.Fprintln(stdout, version())
		return 0
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout, stderr)
			switch {
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				// A bare errUsage was explained already (a flag error and
				// the usage text, by the flag package); a wrapped one says
				// what was wrong, on one line, and where the usage is.
				if err != errUsage {
					fmt.Fprintf(stderr, "signet %s: %s\n", c.name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
					fmt.Fprintf(stderr, "Run 'signet %s --help' for its usage.\n", c.name)
				}
				return 2
			case err != nil:
				fmt.Fprintf(stderr, "signet %s: %v\n", c.name, err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(stderr, "signet: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// errUsage reports bad flags or arguments (already explained on stderr).
var errUsage = errors.New("usage")

// parse parses flags, printing usage for --help and errors.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

// interleaved lets flags follow positional arguments ("token alice --device x").
func interleaved(fs *flag.FlagSet, args []string) ([]string, []string) {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) > 1 && a[0] == '-' {
			flags = append(flags, a)
			name := a
			for len(name) > 0 && name[0] == '-' {
				name = name[1:]
			}
			if f := fs.Lookup(name); f != nil && !isBool(f) && i+1 < len(args) && !containsEq(a) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		positional = append(positional, a)
	}
	return flags, positional
}

// isBool reports whether f is a boolean flag (it takes no separate value).
func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// containsEq reports whether s holds an "=" (a --flag=value argument).
func containsEq(s string) bool {
	for i := range len(s) {
		if s[i] == '=' {
			return true
		}
	}
	return false
}
