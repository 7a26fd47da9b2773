// The Boost.Beast candidate of scripts/serve_libs/run.sh: POST echo, a thread per connection.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/asio.hpp>
#include <thread>
namespace beast=boost::beast; namespace http=beast::http; using tcp=boost::asio::ip::tcp;
void session(tcp::socket sock){ beast::error_code ec; beast::flat_buffer buf; sock.set_option(tcp::no_delay(true));
 for(;;){ http::request<http::string_body> req; http::read(sock,buf,req,ec); if(ec) break;
  http::response<http::string_body> res{http::status::ok, req.version()}; res.set(http::field::content_type,"application/json");
  res.body()=std::move(req.body()); res.keep_alive(req.keep_alive()); res.prepare_payload(); http::write(sock,res,ec); if(ec||!res.keep_alive()) break; }
 sock.shutdown(tcp::socket::shutdown_send, ec);}
int main(int argc,char**argv){ boost::asio::io_context ioc; tcp::acceptor acc(ioc,{boost::asio::ip::make_address("127.0.0.1"),(unsigned short)atoi(argv[1])});
 for(;;){ tcp::socket s(ioc); acc.accept(s); std::thread(session,std::move(s)).detach(); } }
