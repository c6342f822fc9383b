package wire

import (
	"regexp"

	"github.com/signet-im/signet/shared/im"
)

// ActionAnswer is a person's answer to an alert that asks for one (issue
// 16): {"action":"answer","messageId":…,"option":"ack"}, answered with an
// AnswerResult ({"type":"answer",…}).
const (
	ActionAnswer = "answer"
	TypeAnswer   = "answer"
)

// AckOptionPattern is what an answer option looks like (docs/openapi.yaml).
var AckOptionPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Answer is the client frame of ActionAnswer.
type Answer struct {
	// Action is "answer".
	Action string `json:"action"`
	Query
	// MessageID is the alert's messageId.
	MessageID string `json:"messageId"`
	// Option is one of the alert's ack options.
	Option string `json:"option"`
}

// DecodeAnswer validates an answer frame.
func DecodeAnswer(body string) (Answer, error) {
	var f Answer
	if err := decode(body, &f); err != nil {
		return Answer{}, err
	}
	if err := f.Query.check(); err != nil {
		return Answer{}, err
	}
	if f.MessageID == "" || len(f.MessageID) > im.MaxIDLength {
		return Answer{Query: f.Query}, Problemf(CodeBadRequest, "messageId is required")
	}
	if !AckOptionPattern.MatchString(f.Option) {
		return Answer{Query: f.Query}, Problemf(CodeBadRequest, "option must be one of the alert's options: 1-32 characters of [a-z0-9_-], starting with a letter")
	}
	return f, nil
}

// AnswerResult answers an answer frame: the answer that stands for the
// caller ({"type":"answer","ref":…,"messageId":…,"userId":…,"option":…,"answeredAt":…}).
type AnswerResult struct {
	// Type is "answer".
	Type string `json:"type"`
	// Ref echoes the request's ref.
	Ref       string `json:"ref,omitempty"`
	MessageID string `json:"messageId"`
	UserID    string `json:"userId"`
	Option    string `json:"option"`
	// AnsweredAt is when the answer was recorded (the first time, for a repeat).
	AnsweredAt string `json:"answeredAt"`
}
