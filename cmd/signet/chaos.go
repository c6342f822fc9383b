package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/signet-im/signet/shared/chaos"
	"github.com/signet-im/signet/shared/devstack"
	"github.com/signet-im/signet/shared/netem"
)

// errChaos is a chaos run that found faults (exit status 1, after the report).
var errChaos = errors.New("the chaos run found faults")

// runChaos is `signet chaos`: a seeded run of the whole system under a weak
// network, crashes, retries and server faults, reconciled at the end.
func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signet chaos", flag.ContinueOnError)
	seed := fs.Uint64("seed", 1, "seed of every random choice: network faults, device actions, server faults")
	users := fs.Int("users", 8, "users")
	devices := fs.Int("devices", 2, "most devices per user (each user gets 1..N)")
	groups := fs.Int("groups", 2, "groups (random members; their owners add and remove members during the run)")
	messages := fs.Int("messages", 200, "distinct sends")
	profile := fs.String("profile", "chaos", "network between devices and the API: "+strings.Join(netem.ProfileNames(), ", ")+", or chaos (subway with faster episodes)")
	serverFaults := fs.Float64("server-faults", 0.02, "probability that an AWS call or a push of a function fails")
	crashes := fs.Float64("crashes", 0.01, "probability per received entry that the device crashes at a crash point")
	concurrency := fs.Int("concurrency", 100, "Lambda concurrency of the local stack")
	converge := fs.Duration("converge", 10*time.Minute, "how long the final catch-up may take")
	dir := fs.String("dir", "", "directory for the device stores (default: a temporary directory, removed after; a tmpfs such as /dev/shm takes fsync out of large runs)")
	memprofile := fs.String("memprofile", "", "write a heap profile here at the end (for runs that grow)")
	emulator := fs.String("dynamodb-emulator", os.Getenv(devstack.EnvEmulator), "in-process DynamoDB: minidyn (default), memdyn for large runs, or memdyn-stale (memdyn whose eventually consistent reads are answered, one in two, from a replica a second behind, as DynamoDB's may be) (env "+devstack.EnvEmulator+")")
	rateLimits := fs.String("rate-limits", "off", "per-user rate limits of the stack, as SIGNET_RATE_LIMITS (e.g. send=120/1m,connect=60/1m); off by default: the run's users send and reconnect far faster than people")
	groupDelivery := fs.String("group-delivery", "read", "how the run's groups deliver: read (read diffusion, the default: each device's group messages reconciled against the group's log and membership) or write (into inboxes)")
	churn := fs.Float64("churn", 0, "share of a device's actions that change a group (an owner's add, removal or role change, a member's leave) besides the 6% every run makes: 0.2 or more for membership hunts")
	presence := fs.Float64("presence", 0, "share of a device's actions that choose a display state (each user's first device) besides the 2% every run makes: 0.2 or more for display-state hunts")
	sqsEmulator := fs.String("sqs-emulator", os.Getenv(devstack.EnvSQSEmulator), "in-process SQS: goaws (default) or memsqs, for large runs (env "+devstack.EnvSQSEmulator+")")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: signet chaos [flags]

Runs the whole system under chaos on an in-process local stack (DynamoDB and
SQS from AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL_SQS when set): SDK
devices behind signet netem's weak network, offline periods, crashes between
persisting and acking, retried sends (before and after the ACK, from other
devices), reconnect storms, group churn (owners add, remove and re-role
members, members leave), display states chosen (each user's first
device; SetPresence), alerts an app posts over
HTTPS (every 20th send; retried with its Idempotency-Key), and server-side faults
(AWS calls failing mid-handler, lost, 410 and failing pushes, duplicated and
delayed queue messages). Then it reconciles every ACKed message against every
device's journal and the server's inboxes: lost, shown twice, out of order,
unACKed, idempotency violations, group messages held by a user who was not a
member when they were sent, refusals the run cannot explain (only group
sends by users who were not members may be refused), group change
answers that do not name exactly the member they changed (a leave of a
member refused counts too), and traces of
1:1 messages that name a device that did not ack or miss one whose cursor
covers the message, and stored display states that are neither the last
one the server confirmed nor one chosen after it. Exit status 1 if anything
is found. An interrupt (Ctrl-C, SIGTERM) stops the run in whatever phase it
is in, with no verdict (exit status 1, "interrupted during ...").

Examples:
  signet chaos                                   # 200 messages, seed 1
  signet chaos --seed 7 --users 20 --messages 2000 --profile hell
  signet chaos --group-delivery read --groups 4   # read-diffused groups
  signet chaos --groups 4 --churn 0.2             # many membership changes
  signet chaos --users 2 --presence 0.3           # many display state choices
  signet chaos --messages 100000 --users 40 --groups 4 --seed 100 \
      --dynamodb-emulator memdyn --sqs-emulator memsqs --dir /dev/shm   # make chaos-100k

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	p, ok := netem.Profiles[*profile]
	if *profile == "chaos" {
		p, ok = netem.Profile{Loss: 0.05, Duplicate: 0.02, Reorder: 0.05, Delay: 20 * time.Millisecond, Jitter: 20 * time.Millisecond,
			CutEvery: 20 * time.Second, BlackholeEvery: 40 * time.Second, BlackholeFor: 4 * time.Second}, true
	}
	if !ok {
		return fmt.Errorf("%w: unknown profile %q", errUsage, *profile)
	}
	if *churn < 0 || *churn >= 1 {
		return fmt.Errorf("%w: --churn %v is not in [0, 1)", errUsage, *churn)
	}
	if *presence < 0 || *presence >= 1 {
		return fmt.Errorf("%w: --presence %v is not in [0, 1)", errUsage, *presence)
	}
	if *groupDelivery != "write" && *groupDelivery != "read" {
		return fmt.Errorf("%w: --group-delivery %q is not write or read", errUsage, *groupDelivery)
	}
	ddb, sqsURL := devstack.EndpointsFromEnv(os.Getenv)
	res, err := chaos.Run(ctx, chaos.Config{
		Seed: *seed, Users: *users, MaxDevices: *devices, Groups: *groups, Messages: *messages, Network: p,
		ServerFaults: *serverFaults, Crashes: *crashes, Converge: *converge, Dir: *dir, MemProfile: *memprofile, GroupReads: *groupDelivery == "read", Churn: *churn, Presence: *presence,
		Stack:    devstack.Options{DynamoDBEndpoint: ddb, SQSEndpoint: sqsURL, Concurrency: *concurrency, Emulator: *emulator, SQSEmulator: *sqsEmulator, RateLimits: *rateLimits},
		Progress: func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) },
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, res)
	for _, p := range res.Problems {
		fmt.Fprintln(stdout, "  problem:", p)
	}
	if !res.OK() {
		return errChaos
	}
	return nil
}
