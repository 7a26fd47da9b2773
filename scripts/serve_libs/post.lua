wrk.method = "POST"
wrk.body = '{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
wrk.headers["Content-Type"] = "application/json"
