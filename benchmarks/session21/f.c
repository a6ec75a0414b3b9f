#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(){
  size_t n = 1600*4096;
  for (int r=0;r<3;r++){
  char *p = mmap(0,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  double t=now(); for(size_t i=0;i<n;i+=4096) p[i]=1; double a=now()-t;
  munmap(p,n);
  p = mmap(0,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  t=now(); madvise(p,n,23 /*MADV_POPULATE_WRITE*/); double b=now()-t; t=now(); for(size_t i=0;i<n;i+=4096) p[i]=1; double c=now()-t;
  munmap(p,n);
  p = mmap(0,n,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  volatile char s=0; t=now(); for(size_t i=0;i<n;i+=4096) { s+=p[i]; p[i]=1;} double d=now()-t;
  munmap(p,n);
  printf("1600 faults: %.0f ns each; populate: %.0f ns/page + touch %.0f; read-then-write: %.0f ns/page\n", a/1600, b/1600, c/1600, d/1600);
  }
}
