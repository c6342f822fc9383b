package devstack_test

import "os"

// testEndpoints lets CI run the same end-to-end tests against other
// emulators: SIGNET_TEST_SQS_ENDPOINT (e.g. fauxqs) and
// SIGNET_TEST_DYNAMODB_ENDPOINT (e.g. moto). Empty means in-process.
func testEndpoints() (dynamoDB, sqsURL string) {
	return os.Getenv("SIGNET_TEST_DYNAMODB_ENDPOINT"), os.Getenv("SIGNET_TEST_SQS_ENDPOINT")
}

// testSNSEndpoint is an SNS to run the wake-up tests against instead of
// the in-process memsns (LocalStack's: make test-localstack).
func testSNSEndpoint() string { return os.Getenv("SIGNET_TEST_SNS_ENDPOINT") }
