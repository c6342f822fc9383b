package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/signet-im/signet/shared/client"
	"github.com/signet-im/signet/shared/dynamo"
	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/provision"
	"github.com/signet-im/signet/shared/reconcile"
	"github.com/signet-im/signet/shared/wire"
)

// errMismatch is a reconciliation that found lost, duplicated or reordered
// entries (exit status 1, after the report).
var errMismatch = errors.New("the device journal does not match the server")

// runReconcile is `signet reconcile`: compare a user's server inbox with a
// device journal and report what is lost, duplicated or out of order.
func runReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signet reconcile", flag.ContinueOnError)
	user := fs.String("user", "", "the user whose inbox to reconcile (required)")
	device := fs.String("device", "default", "the device whose ack cursor the server holds")
	journal := fs.String("journal", "", "the device journal: JSON lines of inbox entries as `signet tail` prints them ('-': stdin)")
	storePath := fs.String("store", "", "or: the device's SDK store file (stop the client first)")
	ddbEndpoint := fs.String("dynamodb-endpoint", os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), "DynamoDB endpoint (env AWS_ENDPOINT_URL_DYNAMODB; empty: AWS)")
	prefix := fs.String("prefix", "signet-local", "table name prefix of `signet local` / `signet provision` (<prefix>-InboxTable)")
	inboxTable := fs.String("inbox-table", os.Getenv("SIGNET_INBOX_TABLE"), "inbox table name (env SIGNET_INBOX_TABLE; overrides --prefix)")
	messagesTable := fs.String("messages-table", os.Getenv("SIGNET_MESSAGES_TABLE"), "messages table name (env SIGNET_MESSAGES_TABLE; overrides --prefix)")
	region := fs.String("region", envOr("AWS_REGION", "us-east-1"), "region (env AWS_REGION)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: signet reconcile --user U (--journal FILE | --store FILE) [flags]

Reconciles a user's server-side inbox (and the conversation logs its entries
reference) with what one device recorded, by inbox seq, and prints:
  missing       on the server at or below the device's highest seq, not on the device
  duplicated    held twice by the device
  out of order  received after a higher seq (or a higher convSeq of its conversation)
  mismatched    the server holds another message at that seq (two sequences mixed)
  log mismatch  the conversation log contradicts the inbox entry
  unknown       on the device, not on the server (expired, or another epoch)
  unconfirmed   on the device above the server's ack cursor for --device
  pending       on the server above the device's highest seq (not delivered yet)
Exit status 0 when nothing is missing, duplicated, reordered or mismatched; 1
otherwise.

Examples:
  signet tail --user bob > bob.jsonl        # a journal (Ctrl-C to stop)
  signet reconcile --user bob --journal bob.jsonl --dynamodb-endpoint http://127.0.0.1:8000
  signet reconcile --user bob --device phone --store ~/.signet/bob-phone.db --json

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *user == "" || (*journal == "") == (*storePath == "") {
		return fmt.Errorf("%w: give --user and exactly one of --journal and --store", errUsage)
	}
	entries, err := readJournal(*journal, *storePath, os.Stdin)
	if err != nil {
		return err
	}
	tables := dynamo.Tables{Inbox: *inboxTable, Messages: *messagesTable}
	if tables.Inbox == "" {
		tables.Inbox = provision.Name(*prefix, "InboxTable")
	}
	if tables.Messages == "" {
		tables.Messages = provision.Name(*prefix, "MessagesTable")
	}
	db, err := dynamoClient(ctx, *ddbEndpoint, *region)
	if err != nil {
		return err
	}
	srv, err := reconcile.ReadServer(ctx, dynamo.New(db, tables), im.UserID(*user), im.DeviceID(*device))
	if err != nil {
		return err
	}
	report := reconcile.Compare(srv, entries)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			OK bool `json:"ok"`
			reconcile.Report
		}{report.OK(), report}); err != nil {
			return err
		}
	} else {
		fmt.Fprint(stdout, report.Text())
	}
	if !report.OK() {
		return errMismatch
	}
	return nil
}

// readJournal reads a device journal from a JSON lines file (or stdin for
// "-") or from an SDK store file.
func readJournal(path, storePath string, stdin io.Reader) ([]reconcile.Entry, error) {
	if storePath != "" {
		j, err := client.ReadJournal(storePath, 5*time.Second)
		if err != nil {
			return nil, err
		}
		out := make([]reconcile.Entry, len(j.Entries))
		for i, e := range j.Entries {
			out[i] = fromWire(e)
		}
		return out, nil
	}
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var out []reconcile.Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e wire.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Seq <= 0 || e.Message.MessageID == "" {
			return nil, fmt.Errorf("%s line %d: not an inbox entry {\"seq\":N,\"message\":{\"messageId\":…}}", path, line)
		}
		out = append(out, fromWire(e))
	}
	return out, sc.Err()
}

// fromWire is the reconcile entry of an inbox entry.
func fromWire(e wire.Entry) reconcile.Entry {
	return reconcile.Entry{Seq: e.Seq, MessageID: e.Message.MessageID, Conversation: e.Message.ConversationID, ConvSeq: e.Message.ConvSeq, From: e.Message.From}
}

// dynamoClient is a DynamoDB client for endpoint ("" for AWS itself),
// with dummy credentials when none are configured (emulators accept any).
func dynamoClient(ctx context.Context, endpoint, region string) (*dynamodb.Client, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(region)}
	if endpoint != "" && os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	}), nil
}
