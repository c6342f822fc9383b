package devstack_test

import "os"

// testEndpoints lets CI run the same end-to-end tests against other
// emulators: SIGNET_TEST_SQS_ENDPOINT (e.g. fauxqs) and
// SIGNET_TEST_DYNAMODB_ENDPOINT (e.g. moto). Empty means in-process.
func testEndpoints() (dynamoDB, sqsURL string) {
	return os.Getenv("SIGNET_TEST_DYNAMODB_ENDPOINT"), os.Getenv("SIGNET_TEST_SQS_ENDPOINT")
}
