package client_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/reviewledger/reviewledger/api/client"
)

// The examples run against a real reviewledger that main_test.go starts:
// reviewledgerURL is its address, submitterToken one of its tokens, and
// webhookListener listens at its REVIEWLEDGER_NOTIFY_URL, whose webhooks
// notifySecret signs.
var (
	reviewledgerURL = "http://localhost:8080"
	submitterToken  = "submitter-token-example-0001"
	notifySecret    = "whsec_" + base64.StdEncoding.EncodeToString([]byte("client-example-key-0123456789"))
	webhookListener net.Listener
)

// Submit a review and wait for its outcome.
func Example() {
	ctx := context.Background()
	c, err := client.New(client.Config{BaseURL: reviewledgerURL, Token: submitterToken})
	if err != nil {
		log.Fatal(err)
	}
	if _, _, err := c.Submit(ctx, client.Submission{
		ReviewID:     "caption-4711",
		ContentClass: "caption_suggestion",
		ContentType:  "text/plain",
		Content:      "A caption for review",
	}); err != nil {
		log.Fatal(err)
	}
	r, err := c.Wait(ctx, "caption-4711")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.ReviewID, r.State)
	// Output: caption-4711 accepted
}

// Submitting again, after a lost answer or a restart, returns the same
// review.
func ExampleClient_Submit() {
	ctx := context.Background()
	c, err := client.New(client.Config{BaseURL: reviewledgerURL, Token: submitterToken})
	if err != nil {
		log.Fatal(err)
	}
	s := client.Submission{ReviewID: "caption-4712", ContentClass: "caption_suggestion", ContentType: "text/plain", Content: "Another caption"}
	first, created, err := c.Submit(ctx, s)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", created)
	again, created, err := c.Submit(ctx, s)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", created, "same review:", again.SubmittedAt.Equal(first.SubmittedAt))
	// Output:
	// created: true
	// created: false same review: true
}

// Wait long-polls: it returns as soon as the review leaves pending.
func ExampleClient_Wait() {
	c, err := client.New(client.Config{BaseURL: reviewledgerURL, Token: submitterToken})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, err := c.Submit(ctx, client.Submission{ReviewID: "caption-4713", ContentClass: "caption_suggestion", ContentType: "text/plain", Content: "Wait for me"}); err != nil {
		log.Fatal(err)
	}
	r, err := c.Wait(ctx, "caption-4713")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.State, r.DecidedAt != nil)
	// Output: accepted true
}

// SubmitAndWait gets the outcome in the submit's own round trip when it
// comes within WaitStep.
func ExampleClient_SubmitAndWait() {
	c, err := client.New(client.Config{BaseURL: reviewledgerURL, Token: submitterToken})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, created, err := c.SubmitAndWait(ctx, client.Submission{ReviewID: "caption-4715", ContentClass: "caption_suggestion", ContentType: "text/plain", Content: "Decide me"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(created, r.State, r.DecidedAt != nil)
	// Output: true accepted true
}

// Get reads a review; an unknown one is ErrNotFound.
func ExampleClient_Get() {
	c, err := client.New(client.Config{BaseURL: reviewledgerURL, Token: submitterToken})
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Get(context.Background(), "never-submitted")
	fmt.Println(errors.Is(err, client.ErrNotFound))
	// Output: true
}

// Receive the decision webhooks: the handler verifies each one's
// signature and hands over each event once, however often it is sent.
func ExampleReceiver_Handler() {
	recv, err := client.NewReceiver(client.ReceiverConfig{Secret: notifySecret})
	if err != nil {
		log.Fatal(err)
	}
	decided := make(chan client.Event, 1)
	handler := recv.Handler(func(ctx context.Context, e client.Event) error {
		if e.Review.ReviewID == "caption-4714" && e.Type == client.EventDecided {
			decided <- e
		}
		return nil // handled: a redelivery of it is answered without calling this
	})
	// webhookListener listens at REVIEWLEDGER_NOTIFY_URL.
	go func() { _ = http.Serve(webhookListener, handler) }()

	c, err := client.New(client.Config{BaseURL: reviewledgerURL, Token: submitterToken})
	if err != nil {
		log.Fatal(err)
	}
	if _, _, err := c.Submit(context.Background(), client.Submission{ReviewID: "caption-4714", ContentClass: "caption_suggestion", ContentType: "text/plain", Content: "Tell me"}); err != nil {
		log.Fatal(err)
	}
	select {
	case e := <-decided:
		fmt.Println(e.Type, e.Review.ReviewID, e.Review.State)
	case <-time.After(time.Minute):
		fmt.Println("no webhook within a minute")
	}
	// Output: review.decided caption-4714 accepted
}
