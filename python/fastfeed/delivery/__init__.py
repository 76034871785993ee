"""What every receiver's pusher shares: connection and TLS settings, the retry loop, the
streamed file body, and the results of a push."""
