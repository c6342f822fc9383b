package wake

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/signet-im/signet/shared/im"
	"github.com/signet-im/signet/shared/memsns"
)

// Register follows AWS's endpoint guide against a real-protocol SNS: a
// token registered before comes back with its endpoint (also when SNS
// answers that it exists with other attributes), re-enabled if disabled;
// Wake publishes ids only and says when the endpoint is disabled.
func TestRegisterAndWakeAgainstSNS(t *testing.T) {
	t.Parallel()
	s := memsns.New("us-east-1")
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := sns.New(sns.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")})
	ctx := context.Background()
	app, err := c.CreatePlatformApplication(ctx, &sns.CreatePlatformApplicationInput{Name: aws.String("signet"), Platform: aws.String("GCM"), Attributes: map[string]string{"PlatformCredential": "k"}})
	if err != nil {
		t.Fatal(err)
	}
	w := New(c, map[string]string{im.PlatformFCM: *app.PlatformApplicationArn, im.PlatformAPNS: ""})
	if _, err := w.Register(ctx, im.PlatformAPNS, "t"); err == nil {
		t.Fatal("a platform without an application registered")
	}
	// Someone made an endpoint for the token with other attributes.
	other, err := c.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{PlatformApplicationArn: app.PlatformApplicationArn, Token: aws.String("tok"), CustomUserData: aws.String("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetEndpointAttributes(ctx, &sns.SetEndpointAttributesInput{EndpointArn: other.EndpointArn, Attributes: map[string]string{"Enabled": "false"}}); err != nil {
		t.Fatal(err)
	}
	arn, err := w.Register(ctx, im.PlatformFCM, "tok")
	if err != nil || arn != *other.EndpointArn {
		t.Fatalf("register: %s %v, want the existing %s", arn, err, *other.EndpointArn)
	}
	n := im.Wake{Message: "m1", Conversation: "a:ops", Seq: 7, Urgent: true}
	if err := w.Wake(ctx, arn, n); err != nil {
		t.Fatalf("wake after re-enabling: %v", err)
	}
	got := s.Messages()[arn]
	var fcm struct {
		FCM struct {
			Message struct {
				Data    map[string]string         `json:"data"`
				Android struct{ Priority string } `json:"android"`
			} `json:"message"`
		} `json:"fcmV1Message"`
	}
	if len(got) != 1 || json.Unmarshal([]byte(got[0].Message), &fcm) != nil || fcm.FCM.Message.Data["messageId"] != "m1" ||
		fcm.FCM.Message.Data["seq"] != "7" || fcm.FCM.Message.Android.Priority != "high" {
		t.Fatalf("published %+v", got)
	}
	if _, err := c.SetEndpointAttributes(ctx, &sns.SetEndpointAttributesInput{EndpointArn: aws.String(arn), Attributes: map[string]string{"Enabled": "false"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Wake(ctx, arn, n); !errors.Is(err, im.ErrEndpointDisabled) {
		t.Fatalf("wake of a disabled endpoint: %v", err)
	}
	p, _ := Payload(im.Wake{Message: "m2", Conversation: "d:a:b", Seq: 1})
	if !strings.Contains(p, `\"content-available\":1`) || strings.Contains(p, "interruption-level") || !strings.Contains(p, `\"priority\":\"normal\"`) {
		t.Fatalf("a normal wake-up: %s", p)
	}
}
