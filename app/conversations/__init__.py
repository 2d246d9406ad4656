"""Stored Responses API turns (`store`, `previous_response_id`): the store and the chain expansion."""
