#include <Eigen/Dense>
#include <chrono>
#include <cstdio>
#include <vector>
using RM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using M = Eigen::Map<RM, 0, Eigen::OuterStride<>>;
double run(int n,int d,int u,int rows,int reps){
  std::vector<float> x(n*d,0.5f),w(d*u,0.1f),y(n*u);
  for(size_t i=0;i<w.size();++i) w[i]=(i%97)*0.01f;
  auto t0=std::chrono::steady_clock::now();
  for(int i=0;i<reps;++i){
    M Y(y.data(),n,u,Eigen::OuterStride<>(u));
    if(rows>=d){ Y.noalias()=M(x.data(),n,d,Eigen::OuterStride<>(d))*M(w.data(),d,u,Eigen::OuterStride<>(u)); continue;}
    Y.setZero();
    for(int r0=0;r0<d;r0+=rows){int r=std::min(rows,d-r0);
      Y.noalias()+=M(x.data()+r0,n,r,Eigen::OuterStride<>(d))*M(w.data()+(size_t)r0*u,r,u,Eigen::OuterStride<>(u));}
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count()*1e3/reps;
}
int main(){
  struct S{int n,d,u;} ss[]={{32,2450,500},{128,2450,500},{128,9216,4096},{32,9216,4096},{128,2304,384}};
  for(auto s:ss){
    int b32=std::max(1,32768/s.u), b64=std::max(1,65536/s.u);
    int reps = (long)s.n*s.d*s.u > 1e9 ? 3 : 30;
    printf("n=%d d=%d u=%d: whole %.2f  rows%d %.2f  rows%d %.2f rows64min %.2f\n",s.n,s.d,s.u,run(s.n,s.d,s.u,s.d,reps),b32,run(s.n,s.d,s.u,b32,reps),b64,run(s.n,s.d,s.u,b64,reps),run(s.n,s.d,s.u,std::max(64,b32),reps));
  }
}
