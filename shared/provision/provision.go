// Package provision creates the DynamoDB tables and SQS queues that
// template.yaml defines at any DynamoDB- and SQS-compatible endpoint
// (LocalStack, minidyn, moto, goaws, fauxqs). It is idempotent: existing
// tables and queues are kept.
package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/signet-im/signet/shared/template"
)

// Resources are the physical names of what was provisioned.
type Resources struct {
	Tables map[string]string // logical id → table name
	Queues map[string]string // logical id → queue URL
}

// Name returns the physical name of a logical resource under prefix.
func Name(prefix, logicalID string) string { return prefix + "-" + logicalID }

// Progress receives one line per step; nil discards them.
type Progress func(format string, args ...any)

// Apply creates every table and queue of t, named Name(prefix, id).
func Apply(ctx context.Context, t *template.Template, db *dynamodb.Client, q *sqs.Client, prefix string, progress Progress) (Resources, error) {
	tables, err := Tables(ctx, t, db, prefix, progress)
	if err != nil {
		return Resources{}, err
	}
	queues, err := Queues(ctx, t, q, prefix, progress)
	if err != nil {
		return Resources{}, err
	}
	return Resources{Tables: tables, Queues: queues}, nil
}

// Tables creates every table of t and returns logical id → table name.
func Tables(ctx context.Context, t *template.Template, db *dynamodb.Client, prefix string, progress Progress) (map[string]string, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	names := map[string]string{}
	for id, tab := range t.Tables {
		name := Name(prefix, id)
		created, err := createTable(ctx, db, name, tab)
		if err != nil {
			return nil, err
		}
		progress("table %s (%s): %s", name, id, verb(created))
		names[id] = name
	}
	return names, nil
}

// Queues creates every queue of t, dead-letter queues first, and returns
// logical id → queue URL.
func Queues(ctx context.Context, t *template.Template, q *sqs.Client, prefix string, progress Progress) (map[string]string, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	urls := map[string]string{}
	arns := map[string]string{}
	for _, id := range t.QueueOrder() {
		qu := t.Queues[id]
		attrs := map[string]string{}
		if qu.VisibilityTimeout > 0 {
			attrs[string(sqstypes.QueueAttributeNameVisibilityTimeout)] = strconv.Itoa(qu.VisibilityTimeout)
		}
		if qu.RetentionPeriod > 0 {
			attrs[string(sqstypes.QueueAttributeNameMessageRetentionPeriod)] = strconv.Itoa(qu.RetentionPeriod)
		}
		if qu.DeadLetterQueue != "" {
			dlq, ok := arns[qu.DeadLetterQueue]
			if !ok {
				return nil, fmt.Errorf("queue %s: dead-letter queue %s is not in the template", id, qu.DeadLetterQueue)
			}
			policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlq, "maxReceiveCount": qu.MaxReceiveCount})
			attrs[string(sqstypes.QueueAttributeNameRedrivePolicy)] = string(policy)
		}
		name := Name(prefix, id)
		out, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			return nil, fmt.Errorf("create queue %s: %w", name, err)
		}
		url := aws.ToString(out.QueueUrl)
		got, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			return nil, fmt.Errorf("queue %s arn: %w", name, err)
		}
		arns[id] = got.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
		progress("queue %s (%s): %s", name, id, url)
		urls[id] = url
	}
	return urls, nil
}

func verb(created bool) string {
	if created {
		return "created"
	}
	return "exists"
}

// createTable creates one table (or finds it) and waits until it is usable.
func createTable(ctx context.Context, db *dynamodb.Client, name string, tab template.Table) (bool, error) {
	in := &dynamodb.CreateTableInput{TableName: aws.String(name), BillingMode: ddbtypes.BillingModePayPerRequest, TableClass: ddbtypes.TableClass(tab.Class)}
	for attr, typ := range tab.Attributes {
		in.AttributeDefinitions = append(in.AttributeDefinitions, ddbtypes.AttributeDefinition{AttributeName: aws.String(attr), AttributeType: ddbtypes.ScalarAttributeType(typ)})
	}
	in.KeySchema = []ddbtypes.KeySchemaElement{{AttributeName: aws.String(tab.HashKey), KeyType: ddbtypes.KeyTypeHash}}
	if tab.RangeKey != "" {
		in.KeySchema = append(in.KeySchema, ddbtypes.KeySchemaElement{AttributeName: aws.String(tab.RangeKey), KeyType: ddbtypes.KeyTypeRange})
	}
	_, err := db.CreateTable(ctx, in)
	created := err == nil
	if _, inUse := errors.AsType[*ddbtypes.ResourceInUseException](err); err != nil && !inUse {
		return false, fmt.Errorf("create table %s: %w", name, err)
	}
	// Wait for ACTIVE. Some emulators report no status at all: that counts
	// as usable (the SDK's TableExists waiter would hang on them).
	for {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return false, fmt.Errorf("describe table %s: %w", name, err)
		}
		if s := out.Table.TableStatus; s == "" || s == ddbtypes.TableStatusActive {
			break
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if created && tab.TTL != "" {
		// Best effort: emulators without TTL (minidyn) keep items forever.
		_, _ = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName:               aws.String(name),
			TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{AttributeName: aws.String(tab.TTL), Enabled: aws.Bool(true)},
		})
	}
	return created, nil
}
