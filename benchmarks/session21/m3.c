#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc, char**argv){
  char *buf = aligned_alloc(4096, 1<<22);
  memset(buf,1,1<<22);
  long ds[] = {0x8000, 0x8001, 0x8008, 0x8018, 0x801f, 0x8020, 0x8028, 0x8040, 0x8fe0, 0x8ff8, -0x8008, -0x8010, -0x8020, -0x7ff8, -0x7fe0};
  for (int k=0;k<15;k++){ long d = ds[k];
      char *src = buf + 0x100090; char *dst = src + d;
      double best=1e18;
      for(int r=0;r<5;r++){ double t=now(); for(int i=0;i<200;i++){ memcpy(dst,src,0x8000); __asm__ volatile(""::"r"(dst):"memory");} double e=(now()-t)/200; if(e<best)best=e;}
      printf(" %s0x%lx:%.0f\n", d<0?"-":"+", d<0?-d:d, best);
  }
}
