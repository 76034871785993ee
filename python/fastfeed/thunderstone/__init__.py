"""Thunderstone Search Appliance: ThunderstoneReplication data, built and POSTed to a
profile's recvdata.xml."""
