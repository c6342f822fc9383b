package iam

import "testing"

func TestMatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, pattern, value string
		caseSensitive, want  bool
	}{
		{"exact", "dynamodb:GetItem", "dynamodb:GetItem", false, true},
		{"action case folds", "dynamodb:getitem", "dynamodb:GetItem", false, true},
		{"resource case matters", "arn:aws:sqs:r:1:Queue", "arn:aws:sqs:r:1:queue", true, false},
		{"prefix star", "sqs:SendMessage*", "sqs:SendMessageBatch", false, true},
		{"star matches nothing", "sqs:SendMessage*", "sqs:SendMessage", false, true},
		{"star in the middle", "arn:aws:execute-api:r:1:api/prod/POST/@connections/*", "arn:aws:execute-api:r:1:api/prod/POST/@connections/abc=", true, true},
		{"other method", "arn:aws:execute-api:r:1:api/prod/POST/@connections/*", "arn:aws:execute-api:r:1:api/prod/DELETE/@connections/abc", true, false},
		{"question mark is one char", "table/t?", "table/t1", true, true},
		{"question mark needs a char", "table/t?", "table/t", true, false},
		{"backtracking", "a*b*c", "aXbYbZc", true, true},
		{"index is not the table", "arn:t/Inbox", "arn:t/Inbox/index/byTime", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Match(tc.pattern, tc.value, tc.caseSensitive); got != tc.want {
				t.Fatalf("Match(%q, %q) = %v, want %v", tc.pattern, tc.value, got, tc.want)
			}
		})
	}
}

func TestPolicyAllowsOnlyWhatAStatementGrantsAndDenyWins(t *testing.T) {
	t.Parallel()
	p := Policy{Statements: []Statement{
		{Effect: Allow, Actions: []string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, Resource: []string{"arn:table/Inbox"}},
		{Effect: Allow, Actions: []string{"dynamodb:*"}, Resource: []string{"arn:table/Trace"}},
		{Effect: Deny, Actions: []string{"dynamodb:DeleteItem"}, Resource: []string{"arn:table/*"}},
	}}
	cases := []struct {
		name string
		r    Request
		want bool
	}{
		{"granted", Request{"dynamodb:GetItem", "arn:table/Inbox"}, true},
		{"action not granted", Request{"dynamodb:PutItem", "arn:table/Inbox"}, false},
		{"other table", Request{"dynamodb:GetItem", "arn:table/Messages"}, false},
		{"wildcard action", Request{"dynamodb:Query", "arn:table/Trace"}, true},
		{"explicit deny beats an allow", Request{"dynamodb:DeleteItem", "arn:table/Trace"}, false},
		{"other service", Request{"sqs:SendMessage", "arn:table/Inbox"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Allows(tc.r); got != tc.want {
				t.Fatalf("Allows(%v) = %v, want %v", tc.r, got, tc.want)
			}
		})
	}
	if (Policy{}).Allows(Request{"dynamodb:GetItem", "arn:table/Inbox"}) {
		t.Fatal("an empty policy allowed a request")
	}
}
