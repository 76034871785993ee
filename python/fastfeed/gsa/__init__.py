"""Google Search Appliance: feeds and groups feeds, built, validated and pushed to the
feedergate, with its backlog."""
