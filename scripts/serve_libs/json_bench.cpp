// JSON candidates of scripts/serve_libs/run.sh: parse and write a KServe v2 FP32 tensor of N elements.
#include <nlohmann/json.hpp>
#include <rapidjson/document.h>
#include <rapidjson/writer.h>
#include <rapidjson/stringbuffer.h>
#include <simdjson.h>
#include <chrono>
#include <charconv>
#include <cstdio>
#include <random>
#include <string>
#include <vector>
using clk=std::chrono::steady_clock;
template<class F> double t(F f,int n){ auto a=clk::now(); for(int i=0;i<n;i++) f(); return std::chrono::duration<double,std::micro>(clk::now()-a).count()/n; }
int main(int argc,char**argv){ int N=atoi(argv[1]); std::mt19937 g(1); std::uniform_real_distribution<float> d(-1,1);
 std::vector<float> v(N); for(auto&x:v) x=d(g);
 std::string body="{\"id\":\"a\",\"inputs\":[{\"name\":\"x\",\"shape\":[1,"+std::to_string(N)+"],\"datatype\":\"FP32\",\"data\":[";
 for(int i=0;i<N;i++){ char b[32]; snprintf(b,32,"%.9g",v[i]); if(i) body+=','; body+=b; } body+="]}]}";
 int it = N>1000? 20: 20000; double s=0;
 double tn=t([&]{ auto j=nlohmann::json::parse(body); for(auto& x: j["inputs"][0]["data"]) s+=x.get<float>(); },it);
 double tr=t([&]{ rapidjson::Document doc; doc.Parse(body.c_str(), body.size()); for(auto& x: doc["inputs"][0]["data"].GetArray()) s+=x.GetFloat(); },it);
 simdjson::ondemand::parser p; simdjson::padded_string ps(body);
 double ts=t([&]{ auto doc=p.iterate(ps); for(auto x: doc["inputs"].at(0)["data"].get_array()) s+=float(double(x.get_double())); },it);
 double wn=t([&]{ nlohmann::json j; j["data"]=v; std::string o=j.dump(); s+=o.size(); },it);
 double wr=t([&]{ rapidjson::StringBuffer sb; rapidjson::Writer<rapidjson::StringBuffer> w(sb); w.StartObject(); w.Key("data"); w.StartArray(); for(float x: v) w.Double(x); w.EndArray(); w.EndObject(); s+=sb.GetSize(); },it);
 double wc=t([&]{ std::string o="{\"data\":["; o.reserve(v.size()*12); char b[32]; for(size_t i=0;i<v.size();i++){ if(i) o+=','; auto r=std::to_chars(b,b+32,v[i]); o.append(b,r.ptr);} o+="]}"; s+=o.size(); },it);
 printf("to_chars %.1f\n",wc);
 printf("N=%d body=%zu B  parse us: nlohmann %.1f rapidjson %.1f simdjson %.1f | write us: nlohmann %.1f rapidjson %.1f  (%g)\n",N,body.size(),tn,tr,ts,wn,wr,s>0?1.0:0.0);}
