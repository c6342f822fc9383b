package memsns

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/smithy-go"
)

// The real SDK client against memsns: platform application, endpoints
// (idempotent per token), attributes, publish and what it validates, and
// the messages listing in LocalStack's shape.
func TestMobilePushThroughTheSDK(t *testing.T) {
	t.Parallel()
	s := New("eu-west-1")
	var published []Message
	s.OnPublish(func(m Message) { published = append(published, m) })
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := sns.New(sns.Options{Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL), Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")})
	ctx := context.Background()
	app, err := c.CreatePlatformApplication(ctx, &sns.CreatePlatformApplicationInput{Name: aws.String("signet"), Platform: aws.String("APNS"),
		Attributes: map[string]string{"PlatformCredential": "key", "PlatformPrincipal": "cert"}})
	if err != nil || !strings.HasPrefix(*app.PlatformApplicationArn, "arn:aws:sns:eu-west-1:000000000000:app/APNS/signet") {
		t.Fatalf("app: %v %v", app, err)
	}
	ep, err := c.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{PlatformApplicationArn: app.PlatformApplicationArn, Token: aws.String("tok1")})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{PlatformApplicationArn: app.PlatformApplicationArn, Token: aws.String("tok1")})
	if err != nil || *again.EndpointArn != *ep.EndpointArn {
		t.Fatalf("the same token again: %v %v, want %s", again, err, *ep.EndpointArn)
	}
	_, err = c.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{PlatformApplicationArn: app.PlatformApplicationArn, Token: aws.String("tok1"), CustomUserData: aws.String("x")})
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidParameter" || !strings.Contains(apiErr.ErrorMessage(), "different attributes") {
		t.Fatalf("the same token with other attributes: %v", err)
	}
	attrs, err := c.GetEndpointAttributes(ctx, &sns.GetEndpointAttributesInput{EndpointArn: ep.EndpointArn})
	if err != nil || attrs.Attributes["Token"] != "tok1" || attrs.Attributes["Enabled"] != "true" {
		t.Fatalf("attributes: %v %v", attrs, err)
	}
	msg := `{"default":"wake","APNS":"{\"aps\":{\"content-available\":1}}"}`
	out, err := c.Publish(ctx, &sns.PublishInput{TargetArn: ep.EndpointArn, Message: aws.String(msg), MessageStructure: aws.String("json")})
	if err != nil || out.MessageId == nil || len(published) != 1 || published[0].Message != `{"aps":{"content-available":1}}` {
		t.Fatalf("publish: %v %v %v (want the APNS entry, as SNS delivers it)", out, err, published)
	}
	if _, err := c.Publish(ctx, &sns.PublishInput{TargetArn: ep.EndpointArn, Message: aws.String(`{"APNS":"x"}`), MessageStructure: aws.String("json")}); !errors.As(err, &apiErr) || !strings.Contains(apiErr.ErrorMessage(), "No default entry") {
		t.Fatalf("json without default: %v", err)
	}
	if _, err := c.SetEndpointAttributes(ctx, &sns.SetEndpointAttributesInput{EndpointArn: ep.EndpointArn, Attributes: map[string]string{"Enabled": "false"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, &sns.PublishInput{TargetArn: ep.EndpointArn, Message: aws.String("x")}); !errors.As(err, &apiErr) || apiErr.ErrorCode() != "EndpointDisabled" {
		t.Fatalf("publish to a disabled endpoint: %v", err)
	}
	if _, err := c.DeleteEndpoint(ctx, &sns.DeleteEndpointInput{EndpointArn: ep.EndpointArn}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, &sns.PublishInput{TargetArn: ep.EndpointArn, Message: aws.String("x")}); !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidParameter" {
		t.Fatalf("publish to a deleted endpoint: %v", err)
	}
	if _, err := c.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String("t")}); !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidAction" {
		t.Fatalf("an action memsns does not serve: %v", err)
	}
	resp, err := http.Get(srv.URL + MessagesPath + "?endpointArn=" + *ep.EndpointArn)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var listed struct {
		Messages map[string][]Message `json:"platform_endpoint_messages"`
		Region   string               `json:"region"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&listed); err != nil || listed.Region != "eu-west-1" || len(listed.Messages[*ep.EndpointArn]) != 1 || listed.Messages[*ep.EndpointArn][0].MessageStructure != "json" {
		t.Fatalf("listing: %+v %v", listed, err)
	}
	var content string
	if err := json.Unmarshal([]byte(listed.Messages[*ep.EndpointArn][0].Message), &content); err != nil || content != `{"aps":{"content-available":1}}` {
		t.Fatalf("listed message %q (LocalStack's shape: the content as a JSON string): %v", listed.Messages[*ep.EndpointArn][0].Message, err)
	}
}
