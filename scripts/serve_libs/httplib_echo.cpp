// The cpp-httplib candidate of scripts/serve_libs/run.sh: POST echo on loopback.
#include <httplib.h>
int main(int argc,char**argv){ httplib::Server s; s.set_tcp_nodelay(true); s.new_task_queue=[]{return new httplib::ThreadPool(16);};
 s.Post("/v2/models/m/infer",[](const httplib::Request& q, httplib::Response& r){ r.set_content(q.body, "application/json");});
 s.listen("127.0.0.1", atoi(argv[1])); }
