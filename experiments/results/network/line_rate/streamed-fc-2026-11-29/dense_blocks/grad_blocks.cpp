#include <Eigen/Dense>
#include <chrono>
#include <cstdio>
#include <vector>
using RM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using M = Eigen::Map<RM, 0, Eigen::OuterStride<>>;
double run(int n,int d,int u,int rows,int reps){
  std::vector<float> x(n*d,0.5f),dz(n*u,0.2f),dw((size_t)d*u,0.f);
  auto t0=std::chrono::steady_clock::now();
  for(int i=0;i<reps;++i){
    M DZ(dz.data(),n,u,Eigen::OuterStride<>(u));
    for(int r0=0;r0<d;r0+=rows){int r=std::min(rows,d-r0);
      M(dw.data()+(size_t)r0*u,r,u,Eigen::OuterStride<>(u)).noalias()+=M(x.data()+r0,n,r,Eigen::OuterStride<>(d)).transpose()*DZ;}
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count()*1e3/reps;
}
int main(){
  struct S{int n,d,u;} ss[]={{32,2450,500},{128,2450,500},{128,9216,4096},{32,9216,4096},{128,2304,384}};
  for(auto s:ss){
    int b=std::min(s.d,std::max(BMIN,BEL/s.u));
    int reps = (long)s.n*s.d*s.u > 1e9 ? 3 : 30;
    printf("dW n=%d d=%d u=%d: whole %.2f  blocked(%d rows) %.2f ms\n",s.n,s.d,s.u,run(s.n,s.d,s.u,s.d,reps),b,run(s.n,s.d,s.u,b,reps));
  }
}
