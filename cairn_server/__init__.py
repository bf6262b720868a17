"""What both Cairn services share: authentication, errors, paging, settings, the gRPC server."""
