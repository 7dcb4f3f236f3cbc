"""The scan service: turns due job records into job IDs on the Pub/Sub topic, once per trigger.

`main.scan` is the functions-framework target; `app.create_app` builds the Flask app from
settings and injected dependencies; `scanner.Scanner` performs one run without any HTTP.
"""
