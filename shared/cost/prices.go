// Package cost prices what a run of the local stack would be billed on AWS:
// the units its API Gateway, Lambda, DynamoDB and SQS calls were metered in
// (devstack.Metering, callcount), at the list prices of one table (Prices),
// per delivered message.
package cost

// Prices are AWS list prices in US dollars, per unit named in each field.
type Prices struct {
	Region string
	Date   string // when the prices were read
	// Sources are the pricing pages they were read from.
	Sources []string

	WebSocketMessage float64 // API Gateway WebSocket, per message (32 KB increments, each direction)
	ConnectionMinute float64 // API Gateway WebSocket, per connection minute
	LambdaRequest    float64 // per invocation
	LambdaGBSecond   float64 // arm64, per GB-second of billed duration
	WriteUnit        float64 // DynamoDB on-demand, per write request unit
	ReadUnit         float64 // DynamoDB on-demand, per read request unit
	SQSRequest       float64 // standard queue, per request (64 KB chunks)
	StorageGBMonth   float64 // DynamoDB standard table class, per GB-month
	PITRGBMonth      float64 // DynamoDB point-in-time recovery, per GB-month (either class)
	// The Standard-Infrequent Access table class: storage at 40 % of
	// Standard's, reads and writes at 125 %.
	WriteUnitIA      float64 // per write request unit
	ReadUnitIA       float64 // per read request unit
	StorageGBMonthIA float64 // per GB-month
	LogsGB           float64 // CloudWatch Logs ingestion, per GB
}

// ListPrices are us-east-1 list prices (first pricing tier of each).
var ListPrices = Prices{
	Region: "us-east-1",
	Date:   "2026-12-01",
	Sources: []string{
		"https://aws.amazon.com/api-gateway/pricing/ (WebSocket APIs)",
		"https://aws.amazon.com/lambda/pricing/ (Arm)",
		"https://aws.amazon.com/dynamodb/pricing/on-demand/ (Standard and Standard-IA table classes)",
		"https://aws.amazon.com/sqs/pricing/",
		"https://aws.amazon.com/cloudwatch/pricing/ (Logs, standard ingestion)",
	},
	WebSocketMessage: 1.00 / 1e6,
	ConnectionMinute: 0.25 / 1e6,
	LambdaRequest:    0.20 / 1e6,
	LambdaGBSecond:   0.0000133334,
	WriteUnit:        0.625 / 1e6,
	ReadUnit:         0.125 / 1e6,
	SQSRequest:       0.40 / 1e6,
	StorageGBMonth:   0.25,
	PITRGBMonth:      0.20,
	WriteUnitIA:      0.78125 / 1e6,
	ReadUnitIA:       0.15625 / 1e6,
	StorageGBMonthIA: 0.10,
	LogsGB:           0.50,
}
