// Package wake hands wake-ups of offline devices to Amazon SNS mobile push
// (issue 16): a device registers its APNs or FCM token, which becomes an
// SNS platform endpoint under the deployment's platform application; a
// wake-up is a Publish to that endpoint carrying ids only — never a
// message body — that makes the app connect and sync.
package wake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/smithy-go"

	"github.com/signet-im/signet/shared/im"
)

// SNS registers devices and publishes wake-ups.
type SNS struct {
	client *sns.Client
	// apps are the platform application ARNs by platform (im.PlatformAPNS, …).
	apps map[string]string
}

// New returns the wake-up adapter over client with the platform
// application ARN of each platform the deployment has ("" ones left out).
func New(client *sns.Client, apps map[string]string) *SNS {
	w := &SNS{client: client, apps: map[string]string{}}
	for p, arn := range apps {
		if arn != "" {
			w.apps[p] = arn
		}
	}
	return w
}

// existing finds the endpoint ARN in SNS's answer to a token already
// registered with other attributes.
var existing = regexp.MustCompile(`Endpoint (arn:[^ ]+) already exists`)

// Register makes (or finds) the SNS endpoint of token on platform and
// makes sure it is enabled, as AWS's guide to endpoint management says: a
// token registered before comes back with its old endpoint, which APNs or
// FCM feedback may have disabled.
func (w *SNS) Register(ctx context.Context, platform, token string) (string, error) {
	app := w.apps[platform]
	if app == "" {
		return "", fmt.Errorf("no %s platform application configured", platform)
	}
	out, err := w.client.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{PlatformApplicationArn: aws.String(app), Token: aws.String(token)})
	var arn string
	var apiErr smithy.APIError
	switch {
	case err == nil:
		arn = aws.ToString(out.EndpointArn)
	case errors.As(err, &apiErr) && apiErr.ErrorCode() == "InvalidParameter" && existing.MatchString(apiErr.ErrorMessage()):
		arn = existing.FindStringSubmatch(apiErr.ErrorMessage())[1]
	default:
		return "", fmt.Errorf("register %s token: %w", platform, err)
	}
	attrs, err := w.client.GetEndpointAttributes(ctx, &sns.GetEndpointAttributesInput{EndpointArn: aws.String(arn)})
	if err != nil {
		return "", fmt.Errorf("register %s token: %w", platform, err)
	}
	if attrs.Attributes["Enabled"] != "true" || attrs.Attributes["Token"] != token {
		_, err := w.client.SetEndpointAttributes(ctx, &sns.SetEndpointAttributesInput{EndpointArn: aws.String(arn),
			Attributes: map[string]string{"Token": token, "Enabled": "true"}})
		if err != nil {
			return "", fmt.Errorf("register %s token: %w", platform, err)
		}
	}
	return arn, nil
}

// Payload is the JSON message a wake-up publishes (MessageStructure json):
// a background push per platform that says which entry is waiting, with a
// localizable alert key (the app shows its own text: the body never
// leaves Signet this way), time-sensitive and high priority when urgent.
func Payload(n im.Wake) (string, error) {
	ids := map[string]any{"messageId": n.Message, "conversationId": n.Conversation, "seq": n.Seq, "urgent": n.Urgent}
	aps := map[string]any{"content-available": 1, "alert": map[string]string{"loc-key": "SIGNET_NEW_MESSAGE"}}
	if n.Urgent {
		aps["interruption-level"] = "time-sensitive"
		aps["alert"] = map[string]string{"loc-key": "SIGNET_URGENT_ALERT"}
	}
	apns, err := json.Marshal(map[string]any{"aps": aps, "signet": ids})
	if err != nil {
		return "", err
	}
	priority := "normal"
	if n.Urgent {
		priority = "high"
	}
	data := map[string]string{"messageId": string(n.Message), "conversationId": string(n.Conversation), "seq": strconv.FormatInt(n.Seq, 10), "urgent": strconv.FormatBool(n.Urgent)}
	fcm, err := json.Marshal(map[string]any{"fcmV1Message": map[string]any{"message": map[string]any{"data": data, "android": map[string]any{"priority": priority}}}})
	if err != nil {
		return "", err
	}
	def, _ := json.Marshal(map[string]any{"signet": ids})
	msg, err := json.Marshal(map[string]string{"default": string(def), "APNS": string(apns), "APNS_SANDBOX": string(apns), "GCM": string(fcm)})
	return string(msg), err
}

// Wake publishes wake-up n to endpoint; im.ErrEndpointDisabled when SNS
// says the endpoint is disabled.
func (w *SNS) Wake(ctx context.Context, endpoint string, n im.Wake) error {
	msg, err := Payload(n)
	if err != nil {
		return err
	}
	_, err = w.client.Publish(ctx, &sns.PublishInput{TargetArn: aws.String(endpoint), Message: aws.String(msg), MessageStructure: aws.String("json")})
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() == "EndpointDisabled" {
		return fmt.Errorf("wake %s: %w", endpoint, im.ErrEndpointDisabled)
	}
	if err != nil {
		return fmt.Errorf("wake %s: %w", endpoint, err)
	}
	return nil
}
