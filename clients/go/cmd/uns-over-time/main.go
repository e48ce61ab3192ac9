// Command uns-over-time shows the obligation over time from Go: it asks
// Simulate for the plan of a notification scheduled --in from now (the first
// delivery, then the reminders, escalation steps and ack deadline of its type's
// policy), sends it, and, with --withdraw, withdraws it again. It prints one
// line per planned step, then the notification id and its final state.
//
//	uns-over-time --addr 127.0.0.1:50051 --api-key "$(cat uns-dev-key.txt)" --in 1h --withdraw
//
// Exit codes: 0 on success, 2 on a gRPC error (code and message on stderr) or
// a usage error.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	unsv1 "github.com/uns-io/uns/clients/go/gen/uns/v1"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "server address (plaintext)")
	apiKey := flag.String("api-key", "", "API key with the producer role")
	notificationType := flag.String("type", "demo.maintenance_window", "notification type")
	in := flag.Duration("in", time.Hour, "schedule the first attempt this far ahead")
	withdraw := flag.Bool("withdraw", false, "withdraw the notification after sending it")
	flag.Parse()
	if *apiKey == "" {
		fmt.Fprintln(os.Stderr, "--api-key is required")
		os.Exit(2)
	}
	if err := run(*addr, *apiKey, *notificationType, *in, *withdraw); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func run(addr, apiKey, notificationType string, in time.Duration, withdraw bool) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := unsv1.NewNotificationServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+apiKey)

	// Accepted now (idempotency, dedup and policy decided), first attempted later.
	req := &unsv1.SendNotificationRequest{
		NotificationType: notificationType,
		Intent:           unsv1.NotificationIntent_NOTIFICATION_INTENT_ACTION_REQUIRED,
		Title:            "Maintenance starts soon",
		Message:          "db-1 will be read-only for 30 minutes",
		Source:           "example-scheduler-go",
		ScheduleTime:     timestamppb.New(time.Now().Add(in)),
	}
	plan, err := client.Simulate(ctx, &unsv1.SimulateRequest{Request: req})
	if err != nil {
		return err
	}
	for _, step := range plan.GetPlannedSteps() {
		kind := strings.TrimPrefix(step.GetKind().String(), "PLANNED_STEP_KIND_")
		fmt.Printf("%s %d at +%s held=%t\n", kind, step.GetNumber(),
			step.GetOffset().AsDuration().Round(time.Minute), step.GetHeldByQuietHours())
	}

	sent, err := client.SendNotification(ctx, req)
	if err != nil {
		return err
	}
	fmt.Println(sent.GetNotificationId())
	state := sent.GetState()
	if withdraw {
		// The obligation no longer stands: nothing is sent after this commits.
		withdrawn, err := client.WithdrawNotification(ctx, &unsv1.WithdrawNotificationRequest{
			NotificationId: sent.GetNotificationId(),
			Reason:         "maintenance cancelled",
		})
		if err != nil {
			return err
		}
		state = withdrawn.GetNotification().GetState()
	}
	fmt.Println(state)
	return nil
}
